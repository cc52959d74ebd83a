"""What a 4.x client signs, as AclClientRPCHook lays it out."""

from __future__ import annotations

import base64
import hashlib
import hmac

from skiff_broker.remoting.access import signature_of, signed_content
from skiff_broker.remoting.frames import RemotingCommand


def test_the_values_go_in_java_string_order_of_their_names_then_the_body():
    request = RemotingCommand(
        code=310,
        ext_fields={"b": "orders", "a": "producers", "AccessKey": "ak", "Signature": "old"},
        body=b"payload",
    )
    # Upper case sorts before lower case; the Signature field itself is left out.
    assert signed_content(request) == b"akproducersorderspayload"


def test_names_sort_by_utf16_code_units_as_a_java_treemap_does():
    # By code point U+FF21 sorts before U+1F600; by UTF-16 code unit after it (0xD83D...).
    request = RemotingCommand(code=10, ext_fields={"\uff21": "wide", "\U0001f600": "emoji"})
    assert signed_content(request) == b"emojiwide"


def test_the_signature_is_base64_hmac_sha1_keyed_with_the_secret():
    digest = hmac.new(b"secret", b"content", hashlib.sha1).digest()
    assert signature_of(b"content", "secret") == base64.b64encode(digest).decode()
