"""Telemetry sessions under ``--auth enabled``: who is sent a topic's transaction checks,
and whose session a client id names, against a real broker process.

One broker serves the module with a transaction on topic ``txpay`` that its producer
(``payer``, who may publish there) left unresolved: the broker asks about it every
check interval, sending the message itself, body and all. ``nobody`` and ``mallory``
are signed users without any right. Hand-made Telemetry streams play the hostile
clients; the official Python client plays the rightful producer.

Two fences stand between a stream and a check, and each is tried alone: the stream must
name the topic (a ``payer`` stream that names nothing is asked nothing), and its user
must hold Pub on it when the check is sent (a ``payer`` stream whose right is revoked is
asked no more).

Where a test must know that a check round found nobody to ask, it waits for the
broker's log line saying so (one per round), so nothing here depends on timing.
"""

from __future__ import annotations

import datetime
import threading
from collections.abc import Iterator

import grpc
import pytest
from rocketmq import (
    ClientConfiguration,
    Credentials,
    Message,
    TransactionChecker,
    TransactionResolution,
)
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from tests.support.broker_process import BrokerProcess, create_topics, data_dir_of, running_broker
from tests.support.official_client import started_producer
from tests.support.waiting import wait_for

from skiff_broker.auth.signature import signed_headers
from skiff_broker.client.admin import AclEntry, AdminClient
from skiff_broker.client.credentials import Credentials as SkiffCredentials
from skiff_broker.metadata.topic_table import MessageType, TopicConfig

ROOT = ("root", "root-secret")
PAYER = ("payer", "payer-secret")
NOBODY = ("nobody", "nobody-secret")
MALLORY = ("mallory", "mallory-secret")
AUTH_ENV = {"SKIFF_AUTH": "enabled", "SKIFF_AUTH_INIT_USER": ":".join(ROOT)}
TOPIC = "txpay"
BODY = b"wire 1000000 to account 42"
# Every unresolved transaction is asked about at once and then every 0.3 s, for as long
# as the module runs.
CHECKING = (
    "--transaction-timeout",
    "0",
    "--transaction-check-interval",
    "0.3",
    "--transaction-check-max",
    "1000000",
)
NOBODY_TO_ASK = f"no producer of {TOPIC}"


class Undecided(TransactionChecker):
    """Records each check and leaves the transaction unresolved, so checks go on."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.asked: list[Message] = []

    def check(self, message: Message) -> TransactionResolution:
        with self._lock:
            self.asked.append(message)
        return TransactionResolution.TRANSACTION_RESOLUTION_UNSPECIFIED


def client_config(broker: BrokerProcess, keys: tuple[str, str]) -> ClientConfiguration:
    return ClientConfiguration(broker.endpoint, Credentials(*keys))


def signed(keys: tuple[str, str], client_id: str) -> list[tuple[str, str]]:
    now = datetime.datetime.now(datetime.UTC)
    return [*signed_headers(*keys, now), ("x-mq-client-id", client_id)]


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    tmp_path = tmp_path_factory.mktemp("sessions")
    create_topics(
        data_dir_of(tmp_path), TopicConfig(TOPIC, 1, 1, message_type=MessageType.TRANSACTION)
    )
    with running_broker(tmp_path, *CHECKING, env=AUTH_ENV) as process:
        with AdminClient(process.endpoint, credentials=SkiffCredentials(*ROOT)) as admin:
            for user in (PAYER, NOBODY, MALLORY):
                admin.apply_user(*user)
            admin.apply_acl(PAYER[0], [AclEntry((f"Topic:{TOPIC}",), ("Pub",))])
        # The payment is sent as a half message, then neither committed nor rolled back.
        with started_producer(client_config(process, PAYER), TOPIC, checker=Undecided()) as p:
            payment = Message()
            payment.topic = TOPIC
            payment.body = BODY
            p.send(payment, p.begin_transaction())
        yield process


class TelemetryStream:
    """A Telemetry stream opened by hand: it sends ``commands``, then stays open until
    closed, keeping every command the broker sends on it."""

    def __init__(
        self,
        broker: BrokerProcess,
        keys: tuple[str, str],
        client_id: str,
        *commands: spb.TelemetryCommand,
    ) -> None:
        self._channel = grpc.insecure_channel(broker.endpoint)
        self._closing = threading.Event()
        self.received: list[spb.TelemetryCommand] = []
        # How the broker ended the stream; None while it is open.
        self.ended: grpc.StatusCode | None = None

        def requests() -> Iterator[spb.TelemetryCommand]:
            yield from commands
            self._closing.wait()

        self._call = MessagingServiceStub(self._channel).Telemetry(
            requests(), metadata=signed(keys, client_id)
        )
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        try:
            for command in self._call:
                self.received.append(command)
            self.ended = grpc.StatusCode.OK
        except grpc.RpcError as error:
            self.ended = error.code()

    def settings_replies(self) -> list[spb.TelemetryCommand]:
        return [c for c in self.received if c.HasField("settings")]

    def checks(self) -> list[spb.RecoverOrphanedTransactionCommand]:
        return [
            c.recover_orphaned_transaction_command
            for c in self.received
            if c.HasField("recover_orphaned_transaction_command")
        ]

    def close(self) -> None:
        self._closing.set()
        self._call.cancel()
        self._reader.join(10)
        self._channel.close()


@pytest.fixture
def streams() -> Iterator[list[TelemetryStream]]:
    """The streams a test opens; each is closed when the test ends."""
    opened: list[TelemetryStream] = []
    yield opened
    for stream in opened:
        stream.close()


def producer_settings(*topics: str) -> spb.TelemetryCommand:
    return spb.TelemetryCommand(
        settings=pb.Settings(
            client_type=pb.ClientType.PRODUCER,
            publishing=pb.Publishing(topics=[pb.Resource(name=t) for t in topics]),
        )
    )


def rounds_with_nobody_to_ask(broker: BrokerProcess) -> int:
    return sum(1 for r in broker.log_lines() if r.get("msg", "").startswith(NOBODY_TO_ASK))


def wait_for_rounds_with_nobody_to_ask(broker: BrokerProcess, rounds: int) -> None:
    """Until ``rounds`` more check rounds found no producer that may be asked."""
    start = rounds_with_nobody_to_ask(broker)
    wait_for(
        lambda: rounds_with_nobody_to_ask(broker) >= start + rounds,
        f"{rounds} check rounds that find no producer of {TOPIC} to ask",
    )


def heartbeat(broker: BrokerProcess, keys: tuple[str, str], client_id: str) -> pb.Status:
    with grpc.insecure_channel(broker.endpoint) as channel:
        return (
            MessagingServiceStub(channel)
            .Heartbeat(
                spb.HeartbeatRequest(client_type=pb.ClientType.PRODUCER),
                metadata=signed(keys, client_id),
                timeout=30,
            )
            .status
        )


def terminate(broker: BrokerProcess, keys: tuple[str, str], client_id: str) -> pb.Status:
    with grpc.insecure_channel(broker.endpoint) as channel:
        return (
            MessagingServiceStub(channel)
            .NotifyClientTermination(
                spb.NotifyClientTerminationRequest(), metadata=signed(keys, client_id), timeout=30
            )
            .status
        )


def assert_the_rightful_producer_is_asked(broker: BrokerProcess) -> None:
    checker = Undecided()
    with started_producer(client_config(broker, PAYER), TOPIC, checker=checker):
        [asked, *_] = wait_for(lambda: list(checker.asked), "the payer's transaction check")
    assert asked.topic == TOPIC
    assert asked.body == BODY


@pytest.mark.parametrize("claim", ["settings without topics", "heartbeat and no settings"])
# A user holding Pub on the topic but claiming nothing is asked nothing either: what a
# stream names decides, not only what its user may do.
@pytest.mark.parametrize("keys", [NOBODY, PAYER], ids=["no rights", "Pub on the topic"])
def test_a_producer_that_claims_no_topic_is_sent_no_other_topics_check(
    broker, streams, claim, keys
):
    if claim == "settings without topics":
        client_id = f"{keys[0]}-claims-nothing"
        intruder = TelemetryStream(broker, keys, client_id, producer_settings())
        streams.append(intruder)
        wait_for(intruder.settings_replies, "the broker's answer to the intruder's Settings")
    else:
        client_id = f"{keys[0]}-beats"
        assert heartbeat(broker, keys, client_id).code == pb.Code.OK
        intruder = TelemetryStream(broker, keys, client_id)
        streams.append(intruder)
    # The broker goes on looking for someone to ask, and never asks the intruder.
    wait_for_rounds_with_nobody_to_ask(broker, 2)
    assert intruder.checks() == []
    assert intruder.ended is None

    assert_the_rightful_producer_is_asked(broker)
    assert intruder.checks() == []


def test_a_second_identity_under_a_victims_client_id_does_not_get_its_checks(broker, streams):
    checker = Undecided()
    with started_producer(client_config(broker, PAYER), TOPIC, checker=checker) as victim:
        wait_for(lambda: checker.asked, "the victim's first transaction check")
        intruder = TelemetryStream(broker, MALLORY, victim.client_id, producer_settings())
        streams.append(intruder)
        wait_for(intruder.settings_replies, "the broker's answer to the intruder's Settings")
        already = len(checker.asked)
        # The victim's stream is still the one its checks go to.
        wait_for(lambda: len(checker.asked) >= already + 3, "the victim's next checks")
    assert intruder.checks() == []
    assert all(message.body == BODY for message in checker.asked)


def test_another_identity_cannot_terminate_a_clients_session(broker, streams):
    victim = TelemetryStream(broker, PAYER, "payer-by-hand", producer_settings(TOPIC))
    streams.append(victim)
    wait_for(victim.checks, "the victim's first transaction check")

    # NotifyClientTermination names the victim's client id but is signed by mallory:
    # it ends mallory's own session of that id (there is none), not the victim's.
    assert terminate(broker, MALLORY, "payer-by-hand").code == pb.Code.OK
    already = len(victim.checks())
    wait_for(lambda: len(victim.checks()) >= already + 2, "the victim's next checks")
    assert victim.ended is None
    assert victim.checks()[-1].message.body == BODY

    # Its own identity can end it.
    assert terminate(broker, PAYER, "payer-by-hand").code == pb.Code.OK
    assert wait_for(lambda: victim.ended, "the end of the terminated stream") == grpc.StatusCode.OK


def test_a_producer_whose_right_is_revoked_is_asked_no_more(broker, streams):
    producer = TelemetryStream(broker, PAYER, "payer-revoked", producer_settings(TOPIC))
    streams.append(producer)
    wait_for(producer.checks, "the producer's first transaction check")
    with AdminClient(broker.endpoint, credentials=SkiffCredentials(*ROOT)) as admin:
        assert admin.delete_acl(PAYER[0])
        try:
            # The rounds after the revocation find nobody to ask: the stream still names
            # the topic, but its user may no longer publish there. (A check sent before
            # the revocation has long arrived after two rounds.)
            wait_for_rounds_with_nobody_to_ask(broker, 2)
            asked = len(producer.checks())
            wait_for_rounds_with_nobody_to_ask(broker, 2)
            assert len(producer.checks()) == asked
            assert producer.ended is None
        finally:
            admin.apply_acl(PAYER[0], [AclEntry((f"Topic:{TOPIC}",), ("Pub",))])
    # The right given back, the same stream is asked again.
    wait_for(lambda: len(producer.checks()) > asked, "a check once the right is back")
    assert producer.checks()[-1].message.body == BODY
