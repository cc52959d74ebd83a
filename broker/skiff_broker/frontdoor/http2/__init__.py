"""HTTP/2 (RFC 9113) and its header compression HPACK (RFC 7541), server side.

The broker's gRPC server (``frontdoor/grpc/server``) speaks HTTP/2 through this package.
It holds the protocol alone: bytes in, events out, bytes to write. No sockets, no event loop
and no gRPC here, and nothing else of Skiff's is imported (an import-linter contract
checks that), so each piece is tested on bytes alone.

    frames      frame layout, types, flags, settings and error codes
    huffman     the HPACK Huffman code (RFC 7541 Appendix B)
    hpack       header block decoder (with its dynamic table) and encoder
    connection  one server connection: frames, streams, flow control, limits
"""
