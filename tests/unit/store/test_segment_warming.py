"""Which stores write zeros into a segment before it is used."""

from __future__ import annotations

import pytest

from skiff_broker.store.config import FlushType, StoreConfig


@pytest.mark.parametrize(
    ("flush_type", "setting", "warms"),
    [
        # The default: only where an append waits for its flush.
        (FlushType.SYNC_FLUSH, None, True),
        (FlushType.ASYNC_FLUSH, None, False),
        # Set either way, the setting wins.
        (FlushType.ASYNC_FLUSH, True, True),
        (FlushType.SYNC_FLUSH, False, False),
    ],
)
def test_segments_are_warmed_by_default_only_under_sync_flush(
    flush_type: FlushType, setting: bool | None, warms: bool
) -> None:
    config = StoreConfig(flush_type=flush_type, warm_mapped_files=setting)
    assert config.warms_segments is warms
    assert StoreConfig().warm_mapped_files is None
