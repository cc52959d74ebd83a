"""TLS on the client port: settings, certificates, and the listener that tells TLS from
plaintext by a connection's first byte."""
