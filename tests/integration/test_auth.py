"""Authentication and ACLs against a real broker process.

The broker runs with ``--auth enabled``; a super user comes from
SKIFF_AUTH_INIT_USER and applies a normal user and its ACL over the admin API.
Each refusal of a messaging call is checked as the official client reports it
(its own exception types and codes: 40100 UNAUTHORIZED, 40300 FORBIDDEN); Skiff's
own clients, CLI and the admin and record services are checked too.
"""

from __future__ import annotations

import asyncio
import datetime
import json
import subprocess
import uuid
from collections.abc import Iterator

import grpc
import pytest
from rocketmq import (
    ClientConfiguration,
    Credentials,
    Message,
)
from rocketmq.grpc_protocol import definition_pb2 as pb
from rocketmq.grpc_protocol import service_pb2 as spb
from rocketmq.grpc_protocol.service_pb2_grpc import MessagingServiceStub
from rocketmq.v5.exception import ForbiddenException, UnauthorizedException
from rocketmq.v5.util.messaging_result_checker import MessagingResultChecker
from rocketmq.v5.util.signature import Signature
from tests.support.broker_process import (
    SKIFF,
    BrokerProcess,
    broker_env,
    create_topics,
    data_dir_of,
    running_broker,
)
from tests.support.official_client import started_producer, started_simple_consumer
from tests.support.waiting import wait_for

from skiff_broker.admin.v1 import admin_pb2 as apb
from skiff_broker.admin.v1 import admin_pb2_grpc
from skiff_broker.auth.signature import signed_headers
from skiff_broker.client.admin import AclEntry, AdminClient, ResetTo
from skiff_broker.client.credentials import Credentials as SkiffCredentials
from skiff_broker.client.errors import InvalidArgument, MessagingError, NotFound, PermissionDenied
from skiff_broker.client.messaging import MessagingClient, OutgoingMessage
from skiff_broker.client.producer import BatchingProducer
from skiff_broker.client.pull_consumer import PullConsumer
from skiff_broker.metadata.topic_table import TopicConfig
from skiff_broker.records.v1 import records_pb2 as rpb
from skiff_broker.records.v1 import records_pb2_grpc

ROOT = ("root", "root-secret")
ALICE = ("alice", "alice-secret")
# alice may publish to and read orders as group billing; she may only read audit.
ALICE_ACL = [
    AclEntry(("Topic:orders", "Group:billing"), ("Pub", "Sub")),
    AclEntry(("Topic:audit",), ("Sub",)),
]
AUTH_ENV = {"SKIFF_AUTH": "enabled", "SKIFF_AUTH_INIT_USER": ":".join(ROOT)}


def root_admin(broker: BrokerProcess) -> AdminClient:
    return AdminClient(broker.endpoint, credentials=SkiffCredentials(*ROOT))


@pytest.fixture(scope="module")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BrokerProcess]:
    tmp_path = tmp_path_factory.mktemp("auth")
    create_topics(data_dir_of(tmp_path), TopicConfig("orders", 2, 2), TopicConfig("audit", 2, 2))
    with running_broker(tmp_path, env=AUTH_ENV) as process:
        with root_admin(process) as admin:
            assert admin.apply_user(*ALICE)
            assert admin.apply_acl(ALICE[0], ALICE_ACL)
        yield process


def now_utc() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


def config(broker: BrokerProcess, access_key: str, secret_key: str) -> ClientConfiguration:
    return ClientConfiguration(broker.endpoint, Credentials(access_key, secret_key))


def message(topic: str, body: bytes) -> Message:
    msg = Message()
    msg.topic = topic
    msg.body = body
    return msg


def query_route(broker: BrokerProcess, metadata) -> pb.Status:
    with grpc.insecure_channel(broker.endpoint) as channel:
        request = spb.QueryRouteRequest(topic=pb.Resource(name="orders"))
        return MessagingServiceStub(channel).QueryRoute(request, metadata=metadata).status


def official_metadata(broker: BrokerProcess, access_key: str, secret_key: str):
    return Signature.metadata(config(broker, access_key, secret_key), "auth-test-client")


def test_valid_credentials_send_and_receive(broker):
    body = uuid.uuid4().bytes
    with started_producer(config(broker, *ALICE)) as client:
        client.send(message("orders", body))
    with started_simple_consumer(config(broker, *ALICE), "billing", "orders") as client:
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
    with (
        pytest.raises(Exception, match="route"),
        started_producer(config(broker, "alice", "wrong")) as c,
    ):
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
    with (
        started_producer(config(broker, *ALICE)) as client,
        pytest.raises(ForbiddenException) as refused,
    ):
        client.send(message("audit", b"not allowed"))
    assert refused.value.code == pb.Code.FORBIDDEN == 40300
    assert "Pub on Topic:audit" in str(refused.value)


def test_a_group_without_sub_rights_is_forbidden(broker):
    with (
        started_simple_consumer(config(broker, *ALICE), "someone-else", "orders") as client,
        pytest.raises(ForbiddenException) as refused,
    ):
        client.receive(1, 10)
    assert "Sub on Group:someone-else" in str(refused.value)


def telemetry_settings(broker: BrokerProcess, settings: pb.Settings) -> spb.TelemetryCommand:
    """The broker's answer to one Settings on a Telemetry stream signed by alice."""
    with grpc.insecure_channel(broker.endpoint) as channel:
        stream = MessagingServiceStub(channel).Telemetry(
            iter([spb.TelemetryCommand(settings=settings)]),
            metadata=official_metadata(broker, *ALICE),
            timeout=10,
        )
        return next(iter(stream))


def test_telemetry_settings_claim_only_topics_and_groups_the_user_may_use(broker):
    # A producer's settings name the topics it publishes to: the broker would send it
    # those topics' orphaned transactions, so it must be allowed to publish there.
    allowed = pb.Settings(publishing=pb.Publishing(topics=[pb.Resource(name="orders")]))
    assert telemetry_settings(broker, allowed).HasField("settings")
    claimed = pb.Settings(publishing=pb.Publishing(topics=[pb.Resource(name="audit")]))
    with pytest.raises(grpc.RpcError) as refused:
        telemetry_settings(broker, claimed)
    assert refused.value.code() == grpc.StatusCode.PERMISSION_DENIED
    assert "Pub on Topic:audit" in refused.value.details()
    other_group = pb.Settings(
        subscription=pb.Subscription(
            group=pb.Resource(name="someone-else"),
            subscriptions=[pb.SubscriptionEntry(topic=pb.Resource(name="orders"))],
        )
    )
    with pytest.raises(grpc.RpcError) as refused:
        telemetry_settings(broker, other_group)
    assert "Sub on Group:someone-else" in refused.value.details()


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


def test_applying_users_and_acls_again_changes_nothing_and_never_shows_secrets(broker):
    with root_admin(broker) as admin:
        assert not admin.apply_user(*ALICE)
        assert not admin.apply_acl(ALICE[0], ALICE_ACL)
        assert admin.get_acl("alice") == [
            AclEntry(("Topic:orders", "Group:billing"), ("Pub", "Sub"), "Allow"),
            AclEntry(("Topic:audit",), ("Sub",), "Allow"),
        ]
        users = {user.access_key: user for user in admin.list_users()}
        assert users["root"].super_user and not users["alice"].super_user
        with grpc.insecure_channel(broker.endpoint) as channel:
            stub = admin_pb2_grpc.AdminServiceStub(channel)
            now = datetime.datetime.now(datetime.UTC)
            listed = stub.ListUsers(apb.ListUsersRequest(), metadata=signed_headers(*ROOT, now))
            assert {user.secret_key for user in listed.users} == {""}
        with pytest.raises(InvalidArgument, match="Fly"):
            admin.apply_acl("alice", [AclEntry(("Topic:orders",), ("Fly",))])
        with pytest.raises(NotFound, match="apply the user"):
            admin.apply_acl("nobody", ALICE_ACL)
    with (
        AdminClient(broker.endpoint, credentials=SkiffCredentials(*ALICE)) as admin,
        pytest.raises(PermissionDenied, match="super user"),
    ):
        admin.list_users()


def test_a_disabled_user_gets_the_answer_of_a_wrong_secret_and_a_deleted_one_too(broker):
    with root_admin(broker) as admin:
        admin.apply_user("carol", "carol-secret", enabled=False)
        admin.apply_acl("carol", ALICE_ACL)
        # The right secret of a disabled user: nothing in the answer says it was right.
        disabled = query_route(broker, signed_headers("carol", "carol-secret", now_utc()))
        wrong = query_route(broker, signed_headers("carol", "not-the-secret", now_utc()))
        assert disabled == wrong
        assert disabled.code == pb.Code.UNAUTHORIZED
        assert "disabled" not in disabled.message
        # The admin and record services and a Telemetry stream answer it as unauthenticated.
        with grpc.insecure_channel(broker.endpoint) as channel:
            with pytest.raises(grpc.RpcError) as refused:
                admin_pb2_grpc.AdminServiceStub(channel).ListTopics(
                    apb.ListTopicsRequest(),
                    metadata=signed_headers("carol", "carol-secret", now_utc()),
                )
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
            stream = MessagingServiceStub(channel).Telemetry(
                iter([spb.TelemetryCommand(settings=pb.Settings())]),
                metadata=signed_headers("carol", "carol-secret", now_utc()),
                timeout=10,
            )
            with pytest.raises(grpc.RpcError) as refused:
                next(iter(stream))
            assert refused.value.code() == grpc.StatusCode.UNAUTHENTICATED
        assert admin.delete_user("carol") and not admin.delete_user("carol")
    deleted = query_route(broker, signed_headers("carol", "carol-secret", now_utc()))
    assert deleted == wrong


def test_skiff_clients_sign_their_requests(broker):
    body = uuid.uuid4().bytes
    credentials = SkiffCredentials(*ALICE)
    with MessagingClient(broker.endpoint, credentials=credentials) as client:
        client.send([OutgoingMessage(topic="orders", body=body)])
        received = client.receive("billing", "orders", wait_s=5)
        client.ack("billing", "orders", received)
    assert body in [m.body for m in received]
    with PullConsumer(broker.endpoint, credentials=credentials) as consumer:
        pulled = [
            m.body
            for queue_id in consumer.queue_ids("orders")
            for m in consumer.pull("orders", queue_id, 0, max_messages=1000).messages
        ]
    assert body in pulled

    async def produce() -> None:
        async with BatchingProducer(broker.endpoint, credentials=credentials) as producer:
            await producer.send("orders", b"batched")

    asyncio.run(produce())
    with (
        MessagingClient(broker.endpoint) as unsigned,
        pytest.raises(MessagingError) as refused,
    ):
        unsigned.send([OutgoingMessage(topic="orders", body=b"unsigned")])
    assert refused.value.code == "UNAUTHORIZED"


def test_the_cli_signs_with_keys_from_options_or_environment(broker):
    refused = subprocess.run(
        [*SKIFF, "topic", "list", "--endpoint", broker.endpoint],
        capture_output=True,
        text=True,
        env=broker_env(),
        timeout=120,
    )
    assert refused.returncode == 1 and "access key and secret key" in refused.stderr
    keys = {"SKIFF_ACCESS_KEY": ROOT[0], "SKIFF_SECRET_KEY": ROOT[1]}
    applied = subprocess.run(
        [*SKIFF, "admin", "user", "apply", "dave", "--endpoint", broker.endpoint, "--json"],
        capture_output=True,
        text=True,
        env=broker_env({**keys, "SKIFF_USER_SECRET": "dave-secret"}),
        timeout=120,
    )
    assert applied.returncode == 0, applied.stderr
    assert json.loads(applied.stdout) == {"changed": True}
    signing_options = ("--access-key", ROOT[0], "--secret-key", ROOT[1])
    listed = subprocess.run(
        [*SKIFF, "admin", "user", "list", "--endpoint", broker.endpoint, *signing_options],
        capture_output=True,
        text=True,
        env=broker_env(),
        timeout=120,
    )
    assert listed.returncode == 0, listed.stderr
    assert "dave" in listed.stdout and "dave-secret" not in listed.stdout


def test_users_survive_a_restart(tmp_path):
    with running_broker(tmp_path, env=AUTH_ENV) as broker, root_admin(broker) as admin:
        admin.apply_user("erin", "erin-secret", super_user=True)
    with running_broker(tmp_path, env={"SKIFF_AUTH": "enabled"}) as broker:
        assert query_route(broker, signed_headers("erin", "erin-secret", now_utc())).code in (
            pb.Code.OK,
            pb.Code.TOPIC_NOT_FOUND,
        )


def test_with_auth_disabled_unsigned_clients_are_served_as_before(tmp_path):
    create_topics(data_dir_of(tmp_path), TopicConfig("orders", 1, 1))
    with running_broker(tmp_path, env={"SKIFF_AUTH_INIT_USER": ":".join(ROOT)}) as broker:
        with started_producer(ClientConfiguration(broker.endpoint, Credentials())) as client:
            client.send(message("orders", b"unsigned"))
        assert query_route(broker, [("x-mq-client-id", "anonymous")]).code == pb.Code.OK


def test_cluster_routes_name_every_group_with_auth_on(tmp_path):
    homes = [tmp_path / "a", tmp_path / "b"]
    for home in homes:
        home.mkdir()
        create_topics(data_dir_of(home), TopicConfig("orders", 2, 2))
    with running_broker(homes[1], "--broker-name", "b", env=AUTH_ENV) as b:
        peers = ("--broker-name", "a", "--cluster-peers", b.endpoint)
        with (
            running_broker(homes[0], *peers, env=AUTH_ENV) as a,
            grpc.insecure_channel(a.endpoint) as channel,
        ):
            request = spb.QueryRouteRequest(topic=pb.Resource(name="orders"))
            response = MessagingServiceStub(channel).QueryRoute(
                request, metadata=signed_headers(*ROOT, now_utc()), timeout=30
            )
    assert response.status.code == pb.Code.OK, response.status
    assert {queue.broker.name for queue in response.message_queues} == {"a", "b"}


def test_spark_reads_and_writes_with_the_users_keys(spark, broker):
    with root_admin(broker) as admin:
        admin.create_topic("sparked", read_queues=2)
        admin.apply_user("etl", "etl-secret")
        admin.apply_acl(
            "etl",
            [
                AclEntry(("Topic:sparked",), ("Pub", "Sub", "Get")),
                AclEntry(("Cluster",), ("Get",)),
            ],
        )
    keys = {"endpoints": broker.endpoint, "topic": "sparked"}
    signed = {**keys, "accessKey": "etl", "secretKey": "etl-secret"}
    rows = [(f"row-{i}".encode(),) for i in range(10)]
    spark.createDataFrame(rows, "body binary").write.format("skiff").options(**signed).mode(
        "append"
    ).save()
    read = spark.read.format("skiff").options(**signed).load()
    assert sorted(row.body for row in read.select("body").collect()) == sorted(
        body for (body,) in rows
    )
    with pytest.raises(Exception, match="access key and secret key"):
        spark.read.format("skiff").options(**keys).load().count()


def test_consumer_group_tools_need_get_update_or_delete_on_the_group(broker):
    with root_admin(broker) as admin:
        admin.apply_user("dora", "dora-secret")
        admin.apply_acl(
            "dora",
            [
                AclEntry(("Group:ledger",), ("Get",)),
                AclEntry(("Group:scratch",), ("Update", "Delete")),
            ],
        )
        admin.reset_consumer_group("ledger", "orders", ResetTo.EARLIEST)
    with AdminClient(broker.endpoint, credentials=SkiffCredentials("dora", "dora-secret")) as dora:
        assert dora.describe_consumer_group("ledger").group == "ledger"
        with pytest.raises(PermissionDenied, match="Update on Group:ledger"):
            dora.reset_consumer_group("ledger", "orders", ResetTo.LATEST)
        with pytest.raises(PermissionDenied, match="Delete on Group:ledger"):
            dora.delete_consumer_group("ledger")
        with pytest.raises(PermissionDenied, match="List on Cluster"):
            dora.list_consumer_groups()
        dora.reset_consumer_group("scratch", "orders", ResetTo.LATEST)
        assert dora.delete_consumer_group("scratch").topics == ("orders",)
    with root_admin(broker) as admin:
        admin.delete_user("dora")


def test_a_lag_error_names_no_group_the_caller_did_not_name(broker):
    with root_admin(broker) as admin:
        admin.create_topic("ledger", read_queues=1)
        admin.apply_user("gina", "gina-secret")
        admin.apply_acl("gina", [AclEntry(("Topic:ledger", "Group:gina-readers"), ("Get",))])
    root = SkiffCredentials(*ROOT)
    with MessagingClient(broker.endpoint, credentials=root) as client:
        client.send([OutgoingMessage(topic="ledger", body=b"salary")])
        received = wait_for(
            lambda: client.receive("payroll-auditors", "ledger", wait_s=2), "the auditors' message"
        )
        client.ack("payroll-auditors", "ledger", received)
    with (
        AdminClient(broker.endpoint, credentials=SkiffCredentials("gina", "gina-secret")) as gina,
        pytest.raises(NotFound) as refused,
    ):
        gina.consumer_lag("gina-readers", "ledger")
    assert "consumer group 'gina-readers' has not consumed from topic 'ledger'" in str(
        refused.value
    )
    assert "payroll-auditors" not in str(refused.value)
    with root_admin(broker) as admin:
        # The group is there for whoever may list the groups.
        assert "payroll-auditors" in {g.group for g in admin.list_consumer_groups("ledger")}
        admin.delete_user("gina")
