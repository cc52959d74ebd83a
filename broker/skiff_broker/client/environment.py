"""The ``SKIFF_*`` variables Skiff's clients read, each named once.

The ``skiff`` client commands take their options from these variables
(``skiff_broker.commands.options``), ``ClientTls.from_env()`` and
``Credentials.from_env()`` read them in library use, and error messages name them as
the fix. The broker's own settings are declared beside their config fields instead
(``skiff_broker.wire.setting``). The broker's ``--tls-ca`` reads ``SKIFF_TLS_CA`` too,
with the same meaning: the CA that verifies a broker's certificate.
"""

from __future__ import annotations

# The broker's gRPC address, HOST:PORT (the CLI's --endpoint).
ENDPOINT_ENV = "SKIFF_ENDPOINT"
# Connect with TLS (a true value: 1, true, yes, on).
TLS_ENV = "SKIFF_TLS"
# PEM file of the CA to verify the broker's certificate with; implies TLS.
TLS_CA_ENV = "SKIFF_TLS_CA"
# TLS without verifying the broker's certificate; implies TLS.
TLS_INSECURE_ENV = "SKIFF_TLS_INSECURE"
# The user's keys requests are signed with.
ACCESS_KEY_ENV = "SKIFF_ACCESS_KEY"
SECRET_KEY_ENV = "SKIFF_SECRET_KEY"
