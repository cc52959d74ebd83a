"""h2spec, the HTTP/2 conformance suite, as a program the tests run against a broker.

``go.mod`` and ``go.sum`` pin github.com/summerwind/h2spec and what it builds with (from
the Go module proxy); ``tools.go`` only names them for ``go mod``. It is built on first use
into ``${XDG_CACHE_HOME:-~/.cache}/skiff/h2spec-<version>-<hash>`` and reused afterwards.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from tests.official_clients import ClientsUnavailable, _go_binary
from tests.official_clients.maven import InstallError, run_install_step, skiff_cache

H2SPEC_VERSION = "v2.2.1"  # also in go.mod, which go.sum verifies
FOLDER = Path(__file__).resolve().parent


def h2spec_binary() -> Path:
    """Build (once) and return h2spec; ClientsUnavailable says what is missing."""
    pins = hashlib.sha256((FOLDER / "go.mod").read_bytes() + (FOLDER / "go.sum").read_bytes())
    home = skiff_cache() / f"h2spec-{H2SPEC_VERSION}-{pins.hexdigest()[:12]}"
    binary = home / "h2spec"
    if binary.exists():
        return binary
    go = _go_binary()
    home.mkdir(parents=True, exist_ok=True)
    env = {
        **os.environ,
        "PATH": f"{Path(go).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "GOTOOLCHAIN": "local",
        # Read-only go.sum: the module proxy's archives must match the pinned hashes.
        "GOFLAGS": "-mod=readonly -buildvcs=false -modcacherw",
        "CGO_ENABLED": "0",
    }
    try:
        run_install_step(
            [
                go,
                "build",
                "-o",
                str(binary.with_suffix(".partial")),
                "github.com/summerwind/h2spec/cmd/h2spec",
            ],
            f"h2spec {H2SPEC_VERSION}",
            cwd=FOLDER,
            env=env,
        )
    except InstallError as exc:
        raise ClientsUnavailable(str(exc)) from None
    binary.with_suffix(".partial").rename(binary)
    return binary
