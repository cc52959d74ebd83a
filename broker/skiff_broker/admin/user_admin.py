"""The admin API's users and ACLs: proto messages to the model and back, and the store.

Invariants: answers never carry a secret key; a request the model refuses is
InvalidArgument with the model's reason; applying what is already there answers
``changed=False`` and writes nothing.
"""

from __future__ import annotations

from ..auth.model import Decision, PolicyEntry, User, UserStatus, UserType
from ..auth.user_store import UnknownUser, UserStore
from .errors import InvalidArgument, NotFound
from .v1 import admin_pb2 as apb

_TYPES = {apb.NORMAL_USER: UserType.NORMAL, apb.SUPER_USER: UserType.SUPER}
_STATUSES = {apb.ENABLED: UserStatus.ENABLED, apb.DISABLED: UserStatus.DISABLED}
_DECISIONS = {apb.ALLOW: Decision.ALLOW, apb.DENY: Decision.DENY}


def user_to_proto(user: User) -> apb.User:
    return apb.User(
        access_key=user.access_key,
        type=apb.SUPER_USER if user.is_super else apb.NORMAL_USER,
        status=apb.ENABLED if user.enabled else apb.DISABLED,
    )


def acl_to_proto(access_key: str, entries: tuple[PolicyEntry, ...]) -> apb.Acl:
    return apb.Acl(
        access_key=access_key,
        entries=[
            apb.PolicyEntry(
                resources=[str(resource) for resource in entry.resources],
                actions=sorted(action.value for action in entry.actions),
                decision=apb.DENY if entry.decision is Decision.DENY else apb.ALLOW,
                source_ips=list(entry.source_ips),
            )
            for entry in entries
        ],
    )


def _access_key(value: str) -> str:
    if not value:
        raise InvalidArgument("access_key is required")
    return value


class UserAdmin:
    def __init__(self, users: UserStore) -> None:
        self._users = users

    def apply_user(self, spec: apb.User) -> apb.ApplyUserResponse:
        try:
            user = User(
                access_key=_access_key(spec.access_key),
                secret_key=spec.secret_key,
                type=_TYPES.get(spec.type, UserType.NORMAL),
                status=_STATUSES.get(spec.status, UserStatus.ENABLED),
            )
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        changed = self._users.apply_user(user)
        return apb.ApplyUserResponse(user=user_to_proto(user), changed=changed)

    def delete_user(self, access_key: str) -> apb.DeleteUserResponse:
        return apb.DeleteUserResponse(deleted=self._users.delete_user(_access_key(access_key)))

    def get_user(self, access_key: str) -> apb.User:
        user = self._users.user(_access_key(access_key))
        if user is None:
            raise NotFound(f"user {access_key[:64]!r} does not exist; create it with ApplyUser")
        return user_to_proto(user)

    def list_users(self) -> apb.ListUsersResponse:
        return apb.ListUsersResponse(users=[user_to_proto(user) for user in self._users.users()])

    def apply_acl(self, spec: apb.Acl) -> apb.ApplyAclResponse:
        access_key = _access_key(spec.access_key)
        try:
            entries = tuple(
                PolicyEntry.from_document(
                    {
                        "resources": list(entry.resources),
                        "actions": list(entry.actions),
                        "decision": _DECISIONS.get(entry.decision, Decision.ALLOW).value,
                        "sourceIps": list(entry.source_ips),
                    }
                )
                for entry in spec.entries
            )
        except ValueError as exc:
            raise InvalidArgument(str(exc)) from None
        try:
            changed = self._users.apply_acl(access_key, entries)
        except UnknownUser:
            raise NotFound(
                f"user {access_key[:64]!r} does not exist; apply the user before its ACL"
            ) from None
        return apb.ApplyAclResponse(acl=acl_to_proto(access_key, entries), changed=changed)

    def delete_acl(self, access_key: str) -> apb.DeleteAclResponse:
        return apb.DeleteAclResponse(deleted=self._users.delete_acl(_access_key(access_key)))

    def get_acl(self, access_key: str) -> apb.Acl:
        if self._users.user(_access_key(access_key)) is None:
            raise NotFound(f"user {access_key[:64]!r} does not exist")
        return acl_to_proto(access_key, self._users.acl(access_key))

    def list_acls(self) -> apb.ListAclsResponse:
        return apb.ListAclsResponse(
            acls=[acl_to_proto(key, entries) for key, entries in self._users.acls().items()]
        )
