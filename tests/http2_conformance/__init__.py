"""h2spec, the HTTP/2 conformance suite, as a program the tests run against a broker.

``go.mod`` and ``go.sum`` pin github.com/summerwind/h2spec and what it builds with (from
the Go module proxy); ``tools.go`` only names them for ``go mod``. It is built on first use
into ``${XDG_CACHE_HOME:-~/.cache}/skiff/h2spec-<version>-<hash>`` and reused afterwards.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from tests.official_clients import go_build
from tests.official_clients.maven import skiff_cache

H2SPEC_VERSION = "v2.2.1"  # also in go.mod, which go.sum verifies
FOLDER = Path(__file__).resolve().parent


def h2spec_binary() -> Path:
    """Build (once) and return h2spec; ClientsUnavailable says what is missing."""
    pins = hashlib.sha256((FOLDER / "go.mod").read_bytes() + (FOLDER / "go.sum").read_bytes())
    binary = skiff_cache() / f"h2spec-{H2SPEC_VERSION}-{pins.hexdigest()[:12]}" / "h2spec"
    go_build(FOLDER, "github.com/summerwind/h2spec/cmd/h2spec", binary, f"h2spec {H2SPEC_VERSION}")
    return binary
