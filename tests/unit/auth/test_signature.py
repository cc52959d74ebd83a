"""The MQv2-HMAC-SHA1 signature: what the official client makes, the broker accepts."""

from __future__ import annotations

import datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st
from rocketmq import ClientConfiguration, Credentials
from rocketmq.v5.util.signature import Signature

from skiff_broker.auth.signature import (
    AUTHORIZATION,
    DATE_TIME,
    SignatureError,
    sign,
    signed_headers,
    verify,
)

NOW = datetime.datetime(2026, 5, 1, 12, 0, 0, tzinfo=datetime.UTC)
SECRETS = {"alice": "alice-secret"}


def secret_of(key: str) -> str | None:
    return SECRETS.get(key)


def test_the_official_python_client_signs_what_the_broker_computes():
    assert Signature.sign("alice-secret", "20260501T120000Z") == sign(
        "alice-secret", "20260501T120000Z"
    )


def test_headers_made_like_the_official_client_are_accepted():
    config = ClientConfiguration("127.0.0.1:8081", Credentials("alice", "alice-secret"))
    # The official client formats its local time; this machine keeps UTC, as brokers do.
    headers = dict(Signature.metadata(config, "client-1"))
    now = datetime.datetime.strptime(headers[DATE_TIME], "%Y%m%dT%H%M%SZ").replace(
        tzinfo=datetime.UTC
    )
    assert verify(headers, secret_of, now) == "alice"


@given(
    skew=st.integers(min_value=-900, max_value=900),
    secret=st.text(min_size=1, max_size=40),
)
def test_a_right_signature_within_the_skew_is_accepted(skew, secret):
    headers = dict(signed_headers("bob", secret, NOW + datetime.timedelta(seconds=skew)))
    assert verify(headers, {"bob": secret}.get, NOW, 900) == "bob"


@pytest.mark.parametrize("skew", [-901, 901, 86400])
def test_a_stale_or_future_signature_is_refused_saying_so(skew):
    headers = dict(signed_headers("alice", "alice-secret", NOW + datetime.timedelta(seconds=skew)))
    with pytest.raises(SignatureError, match="clock"):
        verify(headers, secret_of, NOW, 900)


def test_a_wrong_secret_and_an_unknown_key_get_the_same_answer():
    wrong = dict(signed_headers("alice", "not-her-secret", NOW))
    unknown = dict(signed_headers("mallory", "alice-secret", NOW))
    with pytest.raises(SignatureError, match="does not match") as first:
        verify(wrong, secret_of, NOW)
    with pytest.raises(SignatureError, match="does not match") as second:
        verify(unknown, secret_of, NOW)
    assert str(first.value).replace("alice", "X") == str(second.value).replace("mallory", "X")


@pytest.mark.parametrize(
    "headers, complaint",
    [
        ({}, "not signed"),
        ({AUTHORIZATION: "Basic abc"}, "MQv2-HMAC-SHA1"),
        ({AUTHORIZATION: "MQv2-HMAC-SHA1 Credential=alice"}, "Signature="),
        ({AUTHORIZATION: "MQv2-HMAC-SHA1 Credential=alice, Signature=00"}, DATE_TIME),
        (
            {AUTHORIZATION: "MQv2-HMAC-SHA1 Credential=alice, Signature=00", DATE_TIME: "now"},
            "UTC time",
        ),
    ],
)
def test_malformed_headers_are_refused_with_what_to_fix(headers, complaint):
    with pytest.raises(SignatureError, match=complaint):
        verify(headers, secret_of, NOW)


@given(st.dictionaries(st.sampled_from([AUTHORIZATION, DATE_TIME, "x"]), st.text(max_size=80)))
def test_arbitrary_headers_are_refused_not_crashed_on(headers):
    with pytest.raises(SignatureError):
        verify(headers, secret_of, NOW)


def test_verify_is_pure():
    headers = dict(signed_headers("alice", "alice-secret", NOW))
    before = dict(headers)
    assert verify(headers, secret_of, NOW) == verify(headers, secret_of, NOW)
    assert headers == before
