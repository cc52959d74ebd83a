"""No user planted while authentication is off gets in once it is on (real broker processes).

While ``--auth`` is disabled the admin API refuses to apply or show users and ACLs; the
bootstrap paths are ``--auth-init-user`` (or its file) and ``skiff store user`` on the
stopped data directory. Users an older Skiff wrote without recording how they were made
are refused once authentication is on, and the start names them.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from tests.support.broker_process import SKIFF, broker_env, data_dir_of, running_broker

from skiff_broker.client.admin import AdminClient
from skiff_broker.client.credentials import Credentials
from skiff_broker.client.errors import FailedPrecondition, Unauthenticated

ROOT = Credentials("root", "root-secret")
BACKDOOR = Credentials("backdoor", "backdoor-secret")
AUTH_ON = {"SKIFF_AUTH": "enabled", "SKIFF_AUTH_INIT_USER": "root:root-secret"}


def signs_in(endpoint: str, who: Credentials) -> bool:
    """Whether a call signed by ``who`` is served (GetBrokerInfo: any super user may)."""
    try:
        with AdminClient(endpoint, credentials=who) as admin:
            admin.broker_info()
    except Unauthenticated:
        return False
    return True


def skiff(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*SKIFF, *args],
        env=broker_env(env),
        capture_output=True,
        text=True,
        timeout=120,
        stdin=subprocess.DEVNULL,
    )


def test_an_unsigned_super_user_is_refused_while_auth_is_off_and_absent_once_it_is_on(
    tmp_path: Path,
) -> None:
    with running_broker(tmp_path) as broker:
        with AdminClient(broker.endpoint) as admin:
            with pytest.raises(FailedPrecondition, match="--auth enabled") as refused:
                admin.apply_user(BACKDOOR.access_key, BACKDOOR.secret_key, super_user=True)
            assert "skiff store user apply" in str(refused.value)
            with pytest.raises(FailedPrecondition, match="--auth-init-user"):
                admin.list_users()
            with pytest.raises(FailedPrecondition):
                admin.get_user("root")
            with pytest.raises(FailedPrecondition):
                admin.list_acls()
        # The CLI over the same API says the same.
        cli = skiff(
            *("admin", "user", "apply", "backdoor", "--super"),
            *("--user-secret", BACKDOOR.secret_key, "--endpoint", broker.endpoint),
        )
        assert cli.returncode != 0
        assert "--auth enabled" in cli.stderr
    with running_broker(tmp_path, env=AUTH_ON) as broker:
        assert not signs_in(broker.endpoint, BACKDOOR)
        with AdminClient(broker.endpoint, credentials=ROOT) as admin:
            assert [user.access_key for user in admin.list_users()] == ["root"]


def test_users_an_older_skiff_wrote_are_named_at_start_and_refused_until_applied_again(
    tmp_path: Path,
) -> None:
    # What an older Skiff wrote, with the admin API open, auth off: no record of how.
    config = data_dir_of(tmp_path) / "config"
    config.mkdir(parents=True)
    planted = {"username": "backdoor", "password": "backdoor-secret", "userType": "Super"}
    (config / "auth.json").write_text(json.dumps({"users": {"backdoor": planted}, "acls": {}}))

    with running_broker(tmp_path, env=AUTH_ON) as broker:
        (warning,) = [r for r in broker.log_lines() if "anyone could have planted" in r["msg"]]
        assert warning["level"] == "warning"
        assert "1 user(s)" in warning["msg"] and "(backdoor)" in warning["msg"]
        assert "skiff store user apply" in warning["msg"]
        assert not signs_in(broker.endpoint, BACKDOOR)
        assert signs_in(broker.endpoint, ROOT)
        # A super user applying it again vouches for it.
        with AdminClient(broker.endpoint, credentials=ROOT) as admin:
            assert admin.apply_user(BACKDOOR.access_key, BACKDOOR.secret_key, super_user=True)
        assert signs_in(broker.endpoint, BACKDOOR)
    with running_broker(tmp_path, env=AUTH_ON) as broker:
        assert not [r for r in broker.log_lines() if "anyone could have planted" in r["msg"]]
        assert signs_in(broker.endpoint, BACKDOOR)


def test_the_offline_bootstrap_makes_a_super_user_and_refuses_while_the_broker_runs(
    tmp_path: Path,
) -> None:
    data_dir = str(data_dir_of(tmp_path))
    made = skiff(
        *("store", "user", "apply", "admin", "--super", "--data-dir", data_dir),
        env={"SKIFF_USER_SECRET": "admin-secret"},
    )
    assert made.returncode == 0, made.stderr
    assert "user admin applied" in made.stdout
    admin_keys = Credentials("admin", "admin-secret")
    # No --auth-init-user: the user made offline is the way in.
    with running_broker(tmp_path, env={"SKIFF_AUTH": "enabled"}) as broker:
        with AdminClient(broker.endpoint, credentials=admin_keys) as admin:
            assert admin.apply_user("alice", "alice-secret")
        busy = skiff(
            *("store", "user", "apply", "mallory", "--super", "--data-dir", data_dir),
            env={"SKIFF_USER_SECRET": "mallory-secret"},
        )
        assert busy.returncode != 0
        assert f"a broker is running on {data_dir}: stop it first" in busy.stderr
    listed = skiff("store", "user", "list", "--data-dir", data_dir)
    assert listed.returncode == 0, listed.stderr
    rows = [line.split() for line in listed.stdout.splitlines()[1:]]
    assert [row[:4] for row in rows] == [
        ["admin", "Super", "yes", "yes"],
        ["alice", "Normal", "yes", "yes"],
    ]
    removed = skiff("store", "user", "delete", "alice", "--data-dir", data_dir)
    assert removed.returncode == 0 and "user alice deleted" in removed.stdout
    with running_broker(tmp_path, env={"SKIFF_AUTH": "enabled"}) as broker:
        assert signs_in(broker.endpoint, admin_keys)
        assert not signs_in(broker.endpoint, Credentials("alice", "alice-secret"))


def test_the_bootstrap_super_user_can_come_from_a_file(tmp_path: Path) -> None:
    spec = tmp_path / "init-user"
    spec.write_text("root:root-secret\n")
    spec.chmod(0o600)
    with running_broker(
        tmp_path, "--auth", "enabled", "--auth-init-user-file", str(spec)
    ) as broker:
        assert signs_in(broker.endpoint, ROOT)
        assert not signs_in(broker.endpoint, BACKDOOR)


def test_an_init_user_on_the_command_line_is_warned_about(tmp_path: Path) -> None:
    with running_broker(
        tmp_path, "--auth", "enabled", "--auth-init-user", "root:root-secret"
    ) as broker:
        assert signs_in(broker.endpoint, ROOT)
        assert any("--auth-init-user on the command line" in r["msg"] for r in broker.log_lines())
