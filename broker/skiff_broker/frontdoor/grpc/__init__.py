"""The broker's gRPC edge: its own server over ``http2``, and what every service shares.

server          the gRPC server: registrations as grpc.aio's, connections from listeners
call            one call on one stream: its messages, handler, context and answer
message_framing gRPC's length-prefixed messages, cut from a stream's DATA
grpc_headers    what gRPC's headers and trailers say (path, deadline, status, metadata)
undecodable     requests that do not parse reach handlers as values
boundary        the one place a handler's failure becomes an answer
peers           the caller's address, as records store it
health_service  the standard health service's name (served, and passed unsigned)
"""
