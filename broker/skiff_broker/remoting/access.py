"""The remoting port's auth gate: RocketMQ's request signature, then ACL 2.0's decision.

A 4.x client signs with ``AclClientRPCHook``: it adds ``AccessKey`` (and
``SecurityToken`` when it has one) to the header fields, then ``Signature``: the
base64 HMAC-SHA1, keyed with the secret key (UTF-8), of every other header field's
value in the order of their names (Java's String order), as UTF-8, followed by the
body. The broker recomputes it with the secret of the user the access key names.

Invariants:
- With authentication on, no request reaches a handler unless it carries the
  signature of an admitted user (auth/user_store.py ``admitted``) and that user may
  do what the request needs (request_rights.py) from the caller's address, by the
  same users, policies and decision (auth/decision.py) as the gRPC door.
- A refusal is NO_PERMISSION (16). An unknown access key, a wrong secret and a
  disabled user get the same answer: it never tells that the secret was right.
- A request whose body the rules must read but cannot is answered SYSTEM_ERROR and
  touches nothing.
"""

from __future__ import annotations

import base64
import hashlib
import hmac

from ..auth.decision import SUPER_ONLY, decide
from ..auth.gate import caller_ip
from ..auth.signature import not_matching
from ..auth.user_store import UserStore
from ..error_text import bounded
from .codes import RequestCode, ResponseCode
from .connection import RemotingConnection
from .frames import RemotingCommand
from .request_rights import needs_of
from .service import HeaderError

ACCESS_KEY = "AccessKey"
SIGNATURE = "Signature"
# Clients up to 4.9.3 left this field out of what they signed on a message query.
_UNIQUE_KEY_QUERY = "_UNIQUE_KEY_QUERY"
_V4_9_3 = 399

NOT_SIGNED = (
    "username cannot be null. Authentication is on: sign requests with RocketMQ's "
    "AclClientRPCHook (new AclClientRPCHook(new SessionCredentials(accessKey, secretKey))) "
    "or, in the Go client, WithCredentials(primitive.Credentials{AccessKey: ..., "
    "SecretKey: ...}), using a Skiff user's access key and secret key"
)


def _java_order(name: str) -> bytes:
    # Java's TreeMap<String> compares UTF-16 code units, which UTF-16-BE bytes sort as.
    return name.encode("utf-16-be", "surrogatepass")


def signed_content(request: RemotingCommand) -> bytes:
    """What a 4.x client signs: the other header values by name, then the body."""
    skip_unique_key = request.code == RequestCode.QUERY_MESSAGE and request.version <= _V4_9_3
    values = []
    for name in sorted(request.ext_fields, key=_java_order):
        if name == SIGNATURE or (skip_unique_key and name == _UNIQUE_KEY_QUERY):
            continue
        values.append(request.ext_fields[name])
    return "".join(values).encode("utf-8", "surrogatepass") + request.body


def signature_of(content: bytes, secret_key: str) -> str:
    digest = hmac.new(secret_key.encode("utf-8"), content, hashlib.sha1).digest()
    return base64.b64encode(digest).decode("ascii")


class RemotingAccess:
    def __init__(self, users: UserStore) -> None:
        self._users = users

    def refusal(
        self, request: RemotingCommand, connection: RemotingConnection
    ) -> RemotingCommand | None:
        """The answer refusing ``request``; None when it may be served."""
        access_key = request.ext_fields.get(ACCESS_KEY) or ""
        if not access_key:
            return request.response(ResponseCode.NO_PERMISSION, NOT_SIGNED)
        user = self._users.admitted(access_key)
        given = request.ext_fields.get(SIGNATURE) or ""
        expected = signature_of(
            signed_content(request), user.secret_key if user is not None else ""
        )
        if user is None or not hmac.compare_digest(given.encode(), expected.encode()):
            return request.response(
                ResponseCode.NO_PERMISSION,
                bounded(f"check signature failed: {not_matching(access_key)}"),
            )
        try:
            needs = needs_of(request)
        except HeaderError as exc:
            return request.response(ResponseCode.SYSTEM_ERROR, str(exc))
        address = caller_ip(connection.peer)
        policies = self._users.acl(access_key)
        # One need at a time, so the answer names the resource refused, as RocketMQ's does.
        for wanted in (SUPER_ONLY,) if needs == SUPER_ONLY else ((n,) for n in needs):
            refused = decide(user, policies, wanted, address)
            if refused is not None:
                resource = "Cluster" if wanted == SUPER_ONLY else str(wanted[0].resource)
                return request.response(
                    ResponseCode.NO_PERMISSION,
                    bounded(
                        f"User:{access_key} has no permission to access {resource} "
                        f"from {address}: {refused.reason}"
                    ),
                )
        return None
