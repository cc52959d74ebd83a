"""TLS: the settings, the broker's certificates (self-signed or given, reloaded), and how
the brokers of a cluster reach each other over it. The listener that tells TLS from
plaintext by a connection's first byte is frontdoor/listener.py."""
