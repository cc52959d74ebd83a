"""h2spec, the HTTP/2 conformance suite (RFC 7540/9113 and HPACK), against a real broker's
client port: plaintext and TLS on the same port, every case including the strict ones.

Each case sends frames a client may or must not send (bad lengths, streams in the wrong
state, floods of settings, broken header blocks, flow-control abuse) and checks the
broker answers as the RFC says: a stream error, a connection error, or an answer.
The broker then still serves a real client: a topic created and a message sent after the
run are read back whole.

h2spec is built from the Go module proxy (tests/http2_conformance); where it cannot be
built the test skips, saying what is missing, except under CI (SKIFF_REQUIRE_K8S), where
it fails: a conformance run that silently does not happen guards nothing.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest
from tests.http2_conformance import h2spec_binary
from tests.official_clients import built_or_skipped
from tests.support.broker_process import running_broker

from skiff_broker.client.admin import AdminClient
from skiff_broker.client.messaging import MessagingClient, OutgoingMessage


@pytest.fixture(scope="module")
def h2spec() -> Path:
    return built_or_skipped(h2spec_binary)


def _run(h2spec: Path, port: str, *flags: str) -> str:
    done = subprocess.run(
        [str(h2spec), "--strict", "--timeout", "5", "-h", "127.0.0.1", "-p", port, *flags],
        capture_output=True,
        text=True,
        timeout=600,
    )
    return done.stdout + done.stderr


@pytest.mark.parametrize("tls", [False, True], ids=["plaintext", "tls"])
def test_every_h2spec_case_passes_and_the_broker_serves_on(h2spec, tmp_path, tls):
    with running_broker(tmp_path) as broker:
        port = broker.endpoint.rpartition(":")[2]
        report = _run(h2spec, port, *(("--tls", "--insecure") if tls else ()))
        summary = re.search(r"(\d+) tests, (\d+) passed, (\d+) skipped, (\d+) failed", report)
        assert summary is not None, report
        total, passed, skipped, failed = (int(n) for n in summary.groups())
        assert failed == 0 and skipped == 0, report
        assert passed == total > 140
        # After every hostile case the broker still serves: a message goes in and comes
        # back whole, through the same port and HTTP/2 server h2spec just ran against.
        topic = f"after-h2spec-{'tls' if tls else 'plaintext'}"
        body = b"still served after h2spec " + bytes(range(256))
        with AdminClient(broker.endpoint) as admin:
            admin.create_topic(topic, read_queues=1)
            with MessagingClient(broker.endpoint) as messaging:
                (receipt,) = messaging.send([OutgoingMessage(topic, body, tag="h2spec")])
            stored = admin.lookup_message(topic, receipt.message_id)
            assert (stored.body, stored.tag) == (body, "h2spec")
            assert topic in [t.name for t in admin.list_topics()]
        assert broker.proc.poll() is None
