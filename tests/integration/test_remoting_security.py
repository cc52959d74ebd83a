"""The remoting port's security: RocketMQ 4.x ACL signatures and TLS beside plaintext.

The unmodified 4.9.8 client (rocketmq-client with rocketmq-acl's ``AclClientRPCHook``)
signs against a broker with ``--auth enabled``; the users and ACLs are applied over the
admin API as for the gRPC door. One JVM run covers every ACL case and one every TLS
case. Raw frames cover what the client cannot be made to send (an admin code, a body
that does not parse) and the enforcing TLS mode.
"""

from __future__ import annotations

import json
import socket
import ssl
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.integration.test_remoting_port import Remoting
from tests.official_clients import (
    JavaClient,
    built_or_skipped,
    remoting_security_java_client,
    run_client,
)
from tests.support.broker_process import (
    BrokerProcess,
    create_topics,
    data_dir_of,
    running_broker,
)

from skiff_broker.client.admin import AclEntry, AdminClient
from skiff_broker.client.credentials import Credentials as SkiffCredentials
from skiff_broker.metadata.topic_table import TopicConfig
from skiff_broker.remoting.access import signature_of, signed_content
from skiff_broker.remoting.frames import FrameDecoder, RemotingCommand, encode

ROOT = ("root", "root-secret")
ALICE = ("alice", "alice-secret")
BOB = ("bob", "bob-secret")  # disabled
CAROL = ("carol", "carol-secret")  # may look at orders, nothing else
# alice publishes to and reads orders as billing; she may read audit, not publish to it.
ALICE_ACL = [
    AclEntry(("Topic:orders", "Group:billing"), ("Pub", "Sub")),
    AclEntry(("Topic:audit",), ("Sub",)),
]
AUTH_ENV = {"SKIFF_AUTH": "enabled", "SKIFF_AUTH_INIT_USER": ":".join(ROOT)}
NO_PERMISSION = 16
MESSAGES = 3


@pytest.fixture(scope="session")
def security_java() -> JavaClient:
    return built_or_skipped(remoting_security_java_client)


@pytest.fixture(scope="module")
def secured(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    tmp_path = tmp_path_factory.mktemp("remoting-auth")
    create_topics(data_dir_of(tmp_path), TopicConfig("orders", 2, 2), TopicConfig("audit", 1, 1))
    with running_broker(tmp_path, env=AUTH_ENV) as process:
        with AdminClient(process.endpoint, credentials=SkiffCredentials(*ROOT)) as admin:
            assert admin.apply_user(*ALICE)
            assert admin.apply_acl(ALICE[0], ALICE_ACL)
            assert admin.apply_user(*BOB, enabled=False)
            assert admin.apply_acl(BOB[0], ALICE_ACL)
            assert admin.apply_user(*CAROL)
            assert admin.apply_acl(CAROL[0], [AclEntry(("Topic:orders",), ("Get",))])
        yield process


def signed(code: int, access_key: str, secret_key: str, body: bytes = b"", **fields: str):
    """A request signed as AclClientRPCHook signs it."""
    request = RemotingCommand(code=code, ext_fields={**fields, "AccessKey": access_key})
    request.body = body
    request.ext_fields["Signature"] = signature_of(signed_content(request), secret_key)
    return request


def call(remoting: Remoting, request: RemotingCommand) -> RemotingCommand:
    request.opaque = 77
    remoting.sock.sendall(encode(request))
    return remoting.answer_to(77)


def test_the_4x_client_signed_by_acl_hook_sends_and_consumes_and_the_rest_are_refused(
    secured: BrokerProcess, security_java: JavaClient, tmp_path: Path
) -> None:
    logs = tmp_path / "client-logs"
    outcome = run_client(
        security_java.command(
            "acl",
            logs,
            namesrv=secured.remoting_endpoint,
            topic="orders",
            group="billing",
            count=MESSAGES,
            access_key=ALICE[0],
            secret_key=ALICE[1],
            disabled_key=BOB[0],
            disabled_secret=BOB[1],
            denied_topic="audit",
            denied_group="payroll",
        ),
        logs,
    )
    assert outcome.errors == [] and outcome.returncode == 0, outcome.stderr[-3000:]
    sent = outcome.summary["sent"]
    assert len(sent) == MESSAGES and {s["status"] for s in sent} == {"SEND_OK"}
    received = outcome.summary["received"]
    assert sorted(r["message"]["msgId"] for r in received) == sorted(s["msgId"] for s in sent)
    refusals = {r["case"]: r for r in outcome.summary["refusals"]}
    # Sub on audit lets her route it; publishing needs Pub, which she lacks.
    denied_topic = refusals["denied-topic"]
    assert denied_topic["routeCode"] == 0
    assert denied_topic["sendCode"] == NO_PERMISSION
    assert "User:alice has no permission to access Topic:audit" in denied_topic["sendRemark"]
    # Unsigned: nothing is served, not even a route; the remark says how to sign.
    unsigned = refusals["unsigned"]
    assert unsigned["routeCode"] == NO_PERMISSION and unsigned["sendCode"] != 0
    assert "AclClientRPCHook" in unsigned["routeRemark"]
    wrong = refusals["wrong-secret"]
    assert wrong["routeCode"] == NO_PERMISSION and wrong["sendCode"] != 0
    assert "check signature failed" in wrong["routeRemark"]
    # A disabled user is told exactly what a wrong secret is told.
    disabled = refusals["disabled"]
    assert disabled["routeCode"] == NO_PERMISSION and disabled["sendCode"] != 0
    assert disabled["routeRemark"] == wrong["routeRemark"].replace("'alice'", "'bob'")
    # She may read orders, but not as a group she holds no Sub on.
    denied_group = refusals["denied-group"]
    assert denied_group["routeCode"] == 0 and denied_group["sendCode"] == NO_PERMISSION
    assert "Group:payroll" in denied_group["sendRemark"]


def test_admin_codes_need_rocketmq_rights_and_codes_without_a_rule_are_for_super_users(
    secured: BrokerProcess,
) -> None:
    remoting = Remoting(secured.remoting_endpoint)
    try:
        # GET_TOPIC_STATS_INFO (202) needs Get on the topic: carol holds it on orders only.
        # Let through, the request is answered by the port (served or not served, never 16).
        assert call(remoting, signed(202, *CAROL, topic="orders")).code != NO_PERMISSION
        refused = call(remoting, signed(202, *CAROL, topic="audit"))
        assert refused.code == NO_PERMISSION
        assert "User:carol has no permission to access Topic:audit" in refused.remark
        # GET_ALL_TOPIC_CONFIG (21) lists every topic: List on Cluster, which she lacks.
        listing = call(remoting, signed(21, *CAROL))
        assert listing.code == NO_PERMISSION and "Cluster" in listing.remark
        # UPDATE_BROKER_CONFIG (25) has no rule: a normal user is refused before anything
        # is said about the code; the super user is let through.
        refused = call(remoting, signed(25, *ALICE, body=b"flushDiskType=SYNC_FLUSH"))
        assert refused.code == NO_PERMISSION and "super user" in refused.remark
        assert call(remoting, signed(25, *ROOT)).code != NO_PERMISSION
        # A heartbeat whose body the rules cannot read is answered, and the port serves on.
        garbled = call(remoting, signed(34, *ALICE, body=b"{not json"))
        assert garbled.code == 1 and "HeartbeatData" in garbled.remark
        route = call(remoting, signed(105, *ALICE, topic="orders"))
        assert route.code == 0
    finally:
        remoting.close()


def test_unsigned_requests_are_refused_whatever_their_code(secured: BrokerProcess) -> None:
    remoting = Remoting(secured.remoting_endpoint)
    try:
        for code in (105, 310, 11, 9999):
            answer = remoting.call(code, topic="orders")
            assert answer.code == NO_PERMISSION and "AclClientRPCHook" in answer.remark
    finally:
        remoting.close()


def test_the_4x_client_with_tls_on_and_off_is_served_on_one_port(
    tmp_path: Path, security_java: JavaClient
) -> None:
    create_topics(data_dir_of(tmp_path), TopicConfig("mixed", 2, 2))
    logs = tmp_path / "client-logs"
    with running_broker(tmp_path) as broker:
        outcome = run_client(
            security_java.command(
                "tls",
                logs,
                namesrv=broker.remoting_endpoint,
                topic="mixed",
                group="mixed-readers",
                count=MESSAGES,
            ),
            logs,
        )
    assert outcome.errors == [] and outcome.returncode == 0, outcome.stderr[-3000:]
    sent = outcome.summary["sent"]
    assert sorted(s["kind"] for s in sent) == ["plain"] * MESSAGES + ["tls"] * MESSAGES
    everything = sorted(s["msgId"] for s in sent)
    for consumer in ("tls", "plain"):
        got = [
            r["message"]["msgId"] for r in outcome.summary["received"] if r["consumer"] == consumer
        ]
        assert sorted(got) == everything, consumer


def test_enforcing_tls_serves_tls_and_closes_plaintext(tmp_path: Path) -> None:
    with running_broker(tmp_path, "--tls-mode", "enforcing", "--ha-listen", "") as broker:
        plain = Remoting(broker.remoting_endpoint)
        try:
            plain.sock.sendall(encode(RemotingCommand(code=105, opaque=1, ext_fields={})))
            assert plain.closed_by_broker()
        finally:
            plain.close()
        host, _, port = broker.remoting_endpoint.rpartition(":")
        context = ssl.create_default_context()
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
        raw = socket.create_connection((host, int(port)), timeout=30)
        with raw, context.wrap_socket(raw) as tls:
            tls.sendall(
                encode(RemotingCommand(code=105, opaque=5, ext_fields={"topic": "nowhere"}))
            )
            decoder, answers = FrameDecoder(), []
            while not answers:
                data = tls.recv(1 << 16)
                assert data, "the broker closed the TLS connection"
                answers = decoder.feed(data)
        # Answered (the topic does not exist): TLS reached the remoting protocol.
        assert answers[0].opaque == 5 and answers[0].code == 17


def _checks_seen(remoting: Remoting, seconds: float) -> list[RemotingCommand]:
    """The CHECK_TRANSACTION_STATE requests (39) the broker sends this connection meanwhile."""
    remoting.sock.settimeout(0.5)
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            data = remoting.sock.recv(1 << 16)
        except TimeoutError:
            continue
        if not data:
            break
        remoting.pending += remoting.decoder.feed(data)
    return [c for c in remoting.pending if c.code == 39]


def test_a_transaction_check_goes_only_to_a_caller_who_may_publish_to_its_topic(
    tmp_path: Path,
) -> None:
    """Naming a producer group proves nothing: the check carries the message's body."""
    create_topics(data_dir_of(tmp_path), TopicConfig("orders", 2, 2))
    checking = ("--transaction-timeout", "0", "--transaction-check-interval", "0.5")
    with running_broker(tmp_path, *checking, env=AUTH_ENV) as broker:
        with AdminClient(broker.endpoint, credentials=SkiffCredentials(*ROOT)) as admin:
            assert admin.apply_user(*ALICE)
            assert admin.apply_acl(ALICE[0], ALICE_ACL)
            assert admin.apply_user(*CAROL)
            assert admin.apply_acl(CAROL[0], [AclEntry(("Topic:orders",), ("Get",))])
        owner, intruder = Remoting(broker.remoting_endpoint), Remoting(broker.remoting_endpoint)
        try:
            heartbeat = json.dumps(
                {"clientID": "intruder@1", "producerDataSet": [{"groupName": "payments"}]}
            ).encode()
            answer = call(intruder, signed(34, *CAROL, body=heartbeat))
            assert answer.code == 0, answer.remark
            properties = "UNIQ_KEY\x01TX-SECRET\x02TRAN_MSG\x01true\x02PGROUP\x01payments\x02WAIT\x01true\x02"
            half = call(
                owner,
                signed(
                    310, *ALICE, body=b"wire 1000000 to account 42",
                    a="payments", b="orders", c="TBW102", d="2", e="0", f="4", g="0", h="0",
                    i=properties,
                ),
            )  # fmt: skip
            assert half.code == 0, half.remark
            # Checks come every half second while the transaction stays unknown.
            assert _checks_seen(owner, 3.0), "the producer that may publish was never asked"
            assert _checks_seen(intruder, 1.0) == []
        finally:
            owner.close()
            intruder.close()
