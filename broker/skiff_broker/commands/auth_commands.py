"""``skiff admin user|acl apply|delete|get|list``: a broker's users and their ACLs.

``apply`` creates or replaces and says whether anything changed, so running it
again with the same arguments is harmless. Each broker keeps its own users and
ACLs: apply them to every broker of a cluster. A broker with authentication off
refuses them all but ``delete`` (an unsigned call could plant a super user): make
the first user with ``--auth-init-user`` or ``skiff store user apply``.
"""

from __future__ import annotations

import dataclasses
import json
from typing import IO

import click

from ..client.admin import AclEntry, AdminClient
from ..client.credentials import Credentials
from .options import client_command
from .output import echo_json, table


@click.group()
def user() -> None:
    """Users: an access key, its secret key, Super or Normal, enabled or disabled."""


@user.command("apply")
@click.argument("user_key", metavar="ACCESS_KEY")
@click.option(
    "--user-secret",
    envvar="SKIFF_USER_SECRET",
    required=True,
    help="The user's secret key, at least 6 characters (env SKIFF_USER_SECRET).",
)
@click.option("--super", "super_user", is_flag=True, help="A super user may do anything.")
@click.option("--disabled", is_flag=True, help="The user's requests are refused.")
@client_command
def apply_user(
    user_key: str,
    user_secret: str,
    super_user: bool,
    disabled: bool,
    endpoint: str,
    credentials: Credentials | None,
    as_json: bool,
) -> None:
    """Create or replace the user ACCESS_KEY."""
    with AdminClient(endpoint, credentials=credentials) as client:
        changed = client.apply_user(
            user_key, user_secret, super_user=super_user, enabled=not disabled
        )
    _changed(as_json, f"user {user_key}", changed)


@user.command("delete")
@click.argument("user_key", metavar="ACCESS_KEY")
@client_command
def delete_user(
    user_key: str, endpoint: str, credentials: Credentials | None, as_json: bool
) -> None:
    """Delete the user ACCESS_KEY and its ACL."""
    with AdminClient(endpoint, credentials=credentials) as client:
        deleted = client.delete_user(user_key)
    _deleted(as_json, f"user {user_key}", deleted)


@user.command("get")
@click.argument("user_key", metavar="ACCESS_KEY")
@client_command
def get_user(user_key: str, endpoint: str, credentials: Credentials | None, as_json: bool) -> None:
    """Show the user ACCESS_KEY (never its secret key)."""
    with AdminClient(endpoint, credentials=credentials) as client:
        found = client.get_user(user_key)
    _users(as_json, [found])


@user.command("list")
@client_command
def list_users(endpoint: str, credentials: Credentials | None, as_json: bool) -> None:
    """Every user of the broker."""
    with AdminClient(endpoint, credentials=credentials) as client:
        found = client.list_users()
    _users(as_json, found)


@click.group()
def acl() -> None:
    """ACLs: what a user may do (ACL 2.0 resources, actions, Allow/Deny, source IPs)."""


@acl.command("apply")
@click.argument("user_key", metavar="ACCESS_KEY")
@click.option(
    "--resource",
    "resources",
    multiple=True,
    help="Cluster, Topic:<name>, Group:<name>, a prefix like Topic:orders*, or * (repeatable).",
)
@click.option(
    "--action",
    "actions",
    multiple=True,
    help="Pub, Sub, Create, Update, Delete, Get, List or All (repeatable).",
)
@click.option(
    "--decision",
    type=click.Choice(["Allow", "Deny"], case_sensitive=False),
    default="Allow",
    show_default=True,
)
@click.option(
    "--source-ip",
    "source_ips",
    multiple=True,
    help="Only from this address or CIDR block (repeatable; default: anywhere).",
)
@click.option(
    "--file",
    "policy_file",
    type=click.File("r"),
    help='Several entries as JSON: [{"resources": [...], "actions": [...], '
    '"decision": "Allow", "sourceIps": [...]}, ...] (instead of the options above).',
)
@client_command
def apply_acl(
    user_key: str,
    resources: tuple[str, ...],
    actions: tuple[str, ...],
    decision: str,
    source_ips: tuple[str, ...],
    policy_file: IO[str] | None,
    endpoint: str,
    credentials: Credentials | None,
    as_json: bool,
) -> None:
    """Make the given entry (or the entries of --file) the whole ACL of ACCESS_KEY."""
    if policy_file is not None:
        if resources or actions or source_ips:
            raise click.UsageError("give either --file or --resource/--action, not both")
        entries = _entries_from_file(policy_file)
    else:
        if not resources or not actions:
            raise click.UsageError("give at least one --resource and one --action (or --file)")
        entries = [AclEntry(resources, actions, decision.capitalize(), source_ips)]
    with AdminClient(endpoint, credentials=credentials) as client:
        changed = client.apply_acl(user_key, entries)
    _changed(as_json, f"the ACL of {user_key}", changed)


@acl.command("delete")
@click.argument("user_key", metavar="ACCESS_KEY")
@client_command
def delete_acl(
    user_key: str, endpoint: str, credentials: Credentials | None, as_json: bool
) -> None:
    """Delete the ACL of ACCESS_KEY (the user stays, allowed nothing)."""
    with AdminClient(endpoint, credentials=credentials) as client:
        deleted = client.delete_acl(user_key)
    _deleted(as_json, f"the ACL of {user_key}", deleted)


@acl.command("get")
@click.argument("user_key", metavar="ACCESS_KEY")
@client_command
def get_acl(user_key: str, endpoint: str, credentials: Credentials | None, as_json: bool) -> None:
    """The ACL entries of ACCESS_KEY."""
    with AdminClient(endpoint, credentials=credentials) as client:
        entries = client.get_acl(user_key)
    _acls(as_json, {user_key: entries})


@acl.command("list")
@client_command
def list_acls(endpoint: str, credentials: Credentials | None, as_json: bool) -> None:
    """The ACL entries of every user."""
    with AdminClient(endpoint, credentials=credentials) as client:
        found = client.list_acls()
    _acls(as_json, found)


def _entries_from_file(policy_file: IO[str]) -> list[AclEntry]:
    try:
        document = json.load(policy_file)
        return [
            AclEntry(
                tuple(item["resources"]),
                tuple(item["actions"]),
                str(item.get("decision", "Allow")),
                tuple(item.get("sourceIps", ())),
            )
            for item in document
        ]
    except (ValueError, KeyError, TypeError) as exc:
        raise click.UsageError(
            f"--file must hold a JSON list of entries with resources and actions ({exc})"
        ) from None


def _changed(as_json: bool, what: str, changed: bool) -> None:
    if as_json:
        echo_json({"changed": changed})
    else:
        click.echo(f"{what} {'applied' if changed else 'unchanged (already as given)'}")


def _deleted(as_json: bool, what: str, deleted: bool) -> None:
    if as_json:
        echo_json({"deleted": deleted})
    else:
        click.echo(f"{what} {'deleted' if deleted else 'did not exist'}")


def _users(as_json: bool, users: list) -> None:
    if as_json:
        echo_json([dataclasses.asdict(u) for u in users])
        return
    rows = [
        [u.access_key, "Super" if u.super_user else "Normal", "yes" if u.enabled else "no"]
        for u in users
    ]
    click.echo(table(["ACCESS KEY", "TYPE", "ENABLED"], rows))


def _acls(as_json: bool, acls: dict[str, list[AclEntry]]) -> None:
    if as_json:
        echo_json(
            {
                key: [
                    {
                        "resources": list(e.resources),
                        "actions": list(e.actions),
                        "decision": e.decision,
                        "sourceIps": list(e.source_ips),
                    }
                    for e in entries
                ]
                for key, entries in acls.items()
            }
        )
        return
    rows = [
        [
            key,
            ",".join(e.resources),
            ",".join(e.actions),
            e.decision,
            ",".join(e.source_ips) or "*",
        ]
        for key, entries in acls.items()
        for e in entries
    ]
    click.echo(table(["ACCESS KEY", "RESOURCES", "ACTIONS", "DECISION", "SOURCE IPS"], rows))
