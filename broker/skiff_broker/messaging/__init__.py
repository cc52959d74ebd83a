"""apache.rocketmq.v2.MessagingService: what the official RocketMQ 5 clients call.

Each RPC checks its input and delegates to delivery/ and the store; errors travel as
RocketMQ v2 ``Status`` codes the official clients understand (``status``). The service
is registered on the client port's gRPC server (frontdoor/grpc/) beside Skiff's own
records/ and admin/ services.
"""
