"""Test tools built on first use (h2spec, the official clients): where one cannot be built
the test skips, saying what is missing, except under CI (SKIFF_REQUIRE_K8S), where it
fails, so a conformance run or an interop test never silently does not happen."""

from __future__ import annotations

import pytest
from tests.http2_conformance import h2spec_binary
from tests.official_clients import ClientsUnavailable, built_or_skipped


def missing_tool() -> None:
    raise ClientsUnavailable("h2spec v2.2.1 needs Go >= 1.22")


def test_a_tool_that_cannot_be_built_skips_here_and_fails_under_ci(monkeypatch):
    monkeypatch.delenv("SKIFF_REQUIRE_K8S", raising=False)
    with pytest.raises(pytest.skip.Exception, match="needs Go"):
        built_or_skipped(missing_tool)
    monkeypatch.setenv("SKIFF_REQUIRE_K8S", "1")
    with pytest.raises(pytest.fail.Exception, match="SKIFF_REQUIRE_K8S is set: h2spec"):
        built_or_skipped(missing_tool)


def test_h2spec_without_go_says_that_h2spec_needs_go(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))  # no go here
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # none built, none cached
    with pytest.raises(ClientsUnavailable, match=r"h2spec v2\.2\.1 needs Go"):
        h2spec_binary()
