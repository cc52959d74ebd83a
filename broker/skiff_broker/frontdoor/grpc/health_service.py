"""The standard gRPC health service (grpc.health.v1.Health), named once.

The server registers it on the client port and the auth gate lets exactly its methods
pass unsigned (probes sign nothing); both take its name from here, so the two cannot
disagree.
"""

from __future__ import annotations

from grpc_health.v1 import health_pb2

HEALTH_SERVICE = health_pb2.DESCRIPTOR.services_by_name["Health"].full_name
