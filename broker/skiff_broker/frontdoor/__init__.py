"""The client port: one listener, HTTP/2 and the broker's gRPC server.

A connection arrives at ``listener`` (TLS or plaintext, told by its first byte, within
``connection_limits``), is spoken to in HTTP/2 by ``http2`` and served as gRPC calls by
``grpc``, which hands each call to the services above it (messaging/, records/, admin/).

Invariants: ``http2`` imports nothing of the broker (it is the protocol alone); nothing
here imports a service; ``grpc`` stands on ``listener`` and ``http2``, never the reverse
(both checked by import-linter).
"""
