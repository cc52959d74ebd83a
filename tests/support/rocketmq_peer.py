"""Apache RocketMQ 5.3.3 beside Skiff in a test module, on request.

With ``SKIFF_COMPARE_ROCKETMQ=1`` a module's ``rocketmq = rocketmq_peer(...)`` fixture
starts RocketMQ's name server and proxy in local mode on loopback (bench/peer_brokers.py;
bench/peer_install.py fetches it from Maven Central on first use, cached under
~/.cache/skiff/peers) with the module's topics, and stops it after the module's last
test. A start costs a minute or more, so CI leaves it off and the comparison tests skip.

Invariant: the peer runs from a folder of its own, removed when it stops.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

COMPARE = os.environ.get("SKIFF_COMPARE_ROCKETMQ") == "1"
COMPARE_REASON = "set SKIFF_COMPARE_ROCKETMQ=1 to compare with Apache RocketMQ 5.3.3"
_BENCH = Path(__file__).resolve().parents[2] / "bench"


def peer_brokers() -> Any:
    """bench/peer_brokers.py, the harness that starts RocketMQ."""
    if str(_BENCH) not in sys.path:
        sys.path.insert(0, str(_BENCH))
    import peer_brokers as harness

    return harness


def rocketmq_peer(
    topics: Mapping[str, str], settings: tuple[str, ...] = ()
) -> Callable[[pytest.TempPathFactory], Iterator[Any]]:
    """A module-scoped fixture yielding a started RocketMQBroker (its ``endpoint`` is the
    proxy's gRPC port) with ``topics`` (name: NORMAL or FIFO) and ``broker.conf`` lines."""

    @pytest.fixture(scope="module")
    def rocketmq(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
        if not COMPARE:
            pytest.skip(COMPARE_REASON)
        harness = peer_brokers()
        peer = harness.RocketMQBroker(
            str(tmp_path_factory.mktemp("rocketmq")),
            harness.ASYNC,
            topics=dict(topics),
            settings=settings,
        )
        try:
            peer.start()
            yield peer
        finally:
            peer.stop()

    return rocketmq
