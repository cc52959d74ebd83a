"""Authentication and ACLs against a real broker process, with the official client.

The broker runs with ``--auth enabled``; a super user comes from
SKIFF_AUTH_INIT_USER and a normal user with an ACL is in ``config/auth.json``.
Each refusal is checked as the official client reports it (its own exception
types and codes: 40100 UNAUTHORIZED, 40300 FORBIDDEN).
"""

from __future__ import annotations

import contextlib
import datetime
import uuid
from collections.abc import Iterator

import grpc
import pytest
from rocketmq import (
    ClientConfiguration,
    Credentials,
    FilterExpression,
    Message,
    Producer,
    SimpleConsumer,
)
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from rocketmq.v5.exception import ForbiddenException, UnauthorizedException
from rocketmq.v5.util.messaging_result_checker import MessagingResultChecker
from rocketmq.v5.util.signature import Signature
from tests.broker_process import BrokerProcess, create_topics, data_dir_of, running_broker

from skiff_broker.admin.v1 import admin_pb2 as apb
from skiff_broker.admin.v1 import admin_pb2_grpc
from skiff_broker.auth.model import PolicyEntry, User
from skiff_broker.auth.signature import signed_headers
from skiff_broker.auth.user_store import UserStore
from skiff_broker.metadata.topic_table import TopicConfig
from skiff_broker.records.v1 import records_pb2 as rpb
from skiff_broker.records.v1 import records_pb2_grpc

ROOT = ("root", "root-secret")
ALICE = ("alice", "alice-secret")
# alice may publish to and read orders as group billing; she may only read audit.
ALICE_ACL = (
    PolicyEntry.from_document(
        {"resources": ["Topic:orders", "Group:billing"], "actions": ["Pub", "Sub"]}
    ),
    PolicyEntry.from_document({"resources": ["Topic:audit"], "actions": ["Sub"]}),
)


def seed_users(data_dir) -> None:
    users = UserStore(str(data_dir / "config" / "auth.json"))
    users.load()
    users.apply_user(User(*ALICE))
    users.apply_acl(ALICE[0], ALICE_ACL)


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    tmp_path = tmp_path_factory.mktemp("auth")
    create_topics(data_dir_of(tmp_path), TopicConfig("orders", 2, 2), TopicConfig("audit", 2, 2))
    seed_users(data_dir_of(tmp_path))
    env = {"SKIFF_AUTH": "enabled", "SKIFF_AUTH_INIT_USER": ":".join(ROOT)}
    with running_broker(tmp_path, env=env) as process:
        yield process


def config(broker: BrokerProcess, access_key: str, secret_key: str) -> ClientConfiguration:
    return ClientConfiguration(broker.endpoint, Credentials(access_key, secret_key))


def message(topic: str, body: bytes) -> Message:
    msg = Message()
    msg.topic = topic
    msg.body = body
    return msg


@contextlib.contextmanager
def producer(configuration: ClientConfiguration) -> Iterator[Producer]:
    client = Producer(configuration)
    client.startup()
    try:
        yield client
    finally:
        client.shutdown()


@contextlib.contextmanager
def consumer(configuration: ClientConfiguration, group: str, topic: str) -> Iterator:
    client = SimpleConsumer(configuration, group, {topic: FilterExpression()}, 5)
    client.startup()
    try:
        yield client
    finally:
        client.shutdown()


def query_route(broker: BrokerProcess, metadata) -> pb.Status:
    with grpc.insecure_channel(broker.endpoint) as channel:
        request = spb.QueryRouteRequest(topic=pb.Resource(name="orders"))
        return MessagingServiceStub(channel).QueryRoute(request, metadata=metadata).status


def official_metadata(broker: BrokerProcess, access_key: str, secret_key: str):
    return Signature.metadata(config(broker, access_key, secret_key), "auth-test-client")


def test_valid_credentials_send_and_receive(broker):
    body = uuid.uuid4().bytes
    with producer(config(broker, *ALICE)) as client:
        client.send(message("orders", body))
    with consumer(config(broker, *ALICE), "billing", "orders") as client:
        received = client.receive(32, 10)
        assert body in [m.body for m in received]
        for m in received:
            client.ack(m)


def test_a_wrong_secret_is_unauthorized(broker):
    status = query_route(broker, official_metadata(broker, "alice", "not-her-secret"))
    with pytest.raises(UnauthorizedException) as refused:
        MessagingResultChecker.check(status)
    assert refused.value.code == pb.Code.UNAUTHORIZED == 40100
    assert "secret key" in status.message
    # The client itself cannot get started with it either.
    with pytest.raises(Exception, match="route"), producer(config(broker, "alice", "wrong")) as c:
        c.send(message("orders", b"never"))


def test_an_unsigned_request_is_unauthorized(broker):
    status = query_route(broker, [("x-mq-client-id", "anonymous")])
    assert status.code == pb.Code.UNAUTHORIZED
    assert "access key and secret key" in status.message


def test_a_stale_timestamp_is_unauthorized(broker):
    an_hour_ago = datetime.datetime.now(datetime.UTC) - datetime.timedelta(hours=1)
    status = query_route(broker, signed_headers(*ALICE, an_hour_ago))
    with pytest.raises(UnauthorizedException):
        MessagingResultChecker.check(status)
    assert "clock" in status.message


def test_a_topic_without_pub_rights_is_forbidden(broker):
    with producer(config(broker, *ALICE)) as client, pytest.raises(ForbiddenException) as refused:
        client.send(message("audit", b"not allowed"))
    assert refused.value.code == pb.Code.FORBIDDEN == 40300
    assert "Pub on Topic:audit" in str(refused.value)


def test_a_group_without_sub_rights_is_forbidden(broker):
    with (
        consumer(config(broker, *ALICE), "someone-else", "orders") as client,
        pytest.raises(ForbiddenException) as refused,
    ):
        client.receive(1, 10)
    assert "Sub on Group:someone-else" in str(refused.value)


def test_the_admin_service_refuses_unsigned_and_unprivileged_calls(broker):
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = admin_pb2_grpc.AdminServiceStub(channel)
        with pytest.raises(grpc.RpcError) as unsigned:
            stub.ListTopics(apb.ListTopicsRequest())
        assert unsigned.value.code() == grpc.StatusCode.UNAUTHENTICATED
        now = datetime.datetime.now(datetime.UTC)
        create = apb.CreateTopicRequest(topic=apb.Topic(name="alices-own"))
        with pytest.raises(grpc.RpcError) as denied:
            stub.CreateTopic(create, metadata=signed_headers(*ALICE, now))
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        assert "Create on Topic:alices-own" in denied.value.details()
        names = stub.ListTopics(apb.ListTopicsRequest(), metadata=signed_headers(*ROOT, now))
        assert {"orders", "audit"} <= {topic.name for topic in names.topics}


def test_the_record_service_refuses_unsigned_and_unprivileged_calls(broker):
    with grpc.insecure_channel(broker.endpoint) as channel:
        stub = records_pb2_grpc.RecordServiceStub(channel)
        with pytest.raises(grpc.RpcError) as unsigned:
            stub.Fetch(rpb.FetchRequest(topic="orders", queue_id=0, offset=0))
        assert unsigned.value.code() == grpc.StatusCode.UNAUTHENTICATED
        now = datetime.datetime.now(datetime.UTC)
        with pytest.raises(grpc.RpcError) as denied:
            stub.Append(rpb.AppendRequest(topic="audit"), metadata=signed_headers(*ALICE, now))
        assert denied.value.code() == grpc.StatusCode.PERMISSION_DENIED
        fetched = stub.Fetch(
            rpb.FetchRequest(topic="audit", queue_id=0, offset=0, max_records=10),
            metadata=signed_headers(*ALICE, now),
        )
        assert fetched.record_count == 0


def test_with_auth_disabled_unsigned_clients_are_served_as_before(tmp_path):
    create_topics(data_dir_of(tmp_path), TopicConfig("orders", 1, 1))
    seed_users(data_dir_of(tmp_path))
    with running_broker(tmp_path) as broker:
        with producer(ClientConfiguration(broker.endpoint, Credentials())) as client:
            client.send(message("orders", b"unsigned"))
        assert query_route(broker, [("x-mq-client-id", "anonymous")]).code == pb.Code.OK
