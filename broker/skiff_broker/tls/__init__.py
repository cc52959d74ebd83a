"""TLS on the client port: settings, certificates and the front door that tells TLS from
plaintext by a connection's first byte."""
