"""``skiff store user apply|delete|list``: a stopped broker's users, edited on its disk.

The way to make users without a signed admin call: the admin API refuses user and
ACL management while authentication is off, and with it on only a super user may
manage them. Whoever can write the data directory can already read every secret in
it, so an edit here is vetted (auth/user_store.py): it is admitted once the broker
runs with ``--auth enabled``. Each command holds the directory's lock for as long as
it runs, so it refuses while a broker runs on the directory, and a broker started
meanwhile refuses to start. A replica's users are its master's: edit the master.
"""

from __future__ import annotations

import os

import click

from .auth.model import User, UserStatus, UserType
from .auth.user_store import UserStore
from .broker_options import declared
from .commands.output import table
from .metadata.state_file import StateFileError
from .store.config import StoreConfig
from .store.errors import StoreError
from .store.message_store import hold_data_dir_lock
from .store.private_files import umask_for

_DATA_DIR = declared(StoreConfig, "data_dir")


def _data_dir_option(command: click.decorators.FC) -> click.decorators.FC:
    return click.option(
        _DATA_DIR.name,
        "data_dir",
        envvar=_DATA_DIR.env,
        default=StoreConfig().data_dir,
        show_default=True,
        type=click.Path(file_okay=False),
        help="The stopped broker's data directory (made if it does not exist yet).",
    )(command)


class _OpenUsers:
    """The directory's users, with its lock held while in the ``with`` block."""

    def __init__(self, data_dir: str) -> None:
        self._data_dir = data_dir
        self._lock_fd = -1

    def __enter__(self) -> UserStore:
        # Whatever is made here (the directory, config/) is the broker's user's alone.
        os.umask(umask_for(None))
        try:
            self._lock_fd = hold_data_dir_lock(self._data_dir)
        except StoreError:
            raise click.ClickException(
                f"a broker is running on {self._data_dir}: stop it first, or manage users "
                "over the admin API signed as a super user (skiff admin user apply)"
            ) from None
        except OSError as exc:
            raise click.ClickException(
                f"cannot open the data directory {self._data_dir}: {exc.strerror}"
            ) from None
        users = UserStore(os.path.join(self._data_dir, "config", "auth.json"))
        try:
            users.load()
        except StateFileError as exc:
            self.__exit__()
            raise click.ClickException(str(exc)) from None
        return users

    def __exit__(self, *_: object) -> None:
        if self._lock_fd >= 0:
            os.close(self._lock_fd)
            self._lock_fd = -1


@click.group()
def user() -> None:
    """Users of a stopped broker's data directory (the way to make the first one, too)."""


@user.command("apply")
@click.argument("user_key", metavar="ACCESS_KEY")
@click.option(
    "--user-secret",
    envvar="SKIFF_USER_SECRET",
    prompt="Secret key",
    hide_input=True,
    confirmation_prompt=True,
    help="The user's secret key, at least 6 characters (env SKIFF_USER_SECRET; asked for "
    "when neither is given, which keeps it off the command line).",
)
@click.option("--super", "super_user", is_flag=True, help="A super user may do anything.")
@click.option("--disabled", is_flag=True, help="The user's requests are refused.")
@_data_dir_option
def apply_user(
    user_key: str, user_secret: str, super_user: bool, disabled: bool, data_dir: str
) -> None:
    """Create or replace the user ACCESS_KEY in the data directory."""
    try:
        wanted = User(
            access_key=user_key,
            secret_key=user_secret,
            type=UserType.SUPER if super_user else UserType.NORMAL,
            status=UserStatus.DISABLED if disabled else UserStatus.ENABLED,
        )
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    with _OpenUsers(data_dir) as users:
        changed = users.apply_user(wanted)
    click.echo(f"user {user_key} {'applied' if changed else 'unchanged (already as given)'}")


@user.command("delete")
@click.argument("user_key", metavar="ACCESS_KEY")
@_data_dir_option
def delete_user(user_key: str, data_dir: str) -> None:
    """Delete the user ACCESS_KEY and its ACL from the data directory."""
    with _OpenUsers(data_dir) as users:
        deleted = users.delete_user(user_key)
    click.echo(f"user {user_key} {'deleted' if deleted else 'did not exist'}")


@user.command("list")
@_data_dir_option
def list_users(data_dir: str) -> None:
    """Every user of the data directory (never a secret), and whether it is admitted."""
    with _OpenUsers(data_dir) as users:
        found = users.users()
        unvetted = set(users.unvetted())
    rows = [
        [
            u.access_key,
            "Super" if u.is_super else "Normal",
            "yes" if u.enabled else "no",
            "no: made unchecked, apply it again" if u.access_key in unvetted else "yes",
        ]
        for u in found
    ]
    click.echo(table(["ACCESS KEY", "TYPE", "ENABLED", "ADMITTED"], rows))
