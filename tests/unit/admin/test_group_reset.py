"""Where a reset moves a queue, before the store is asked anything."""

from __future__ import annotations

import pytest

from skiff_broker.admin.errors import InvalidArgument
from skiff_broker.admin.group_admin import ResetTarget, reset_offset_for


def test_earliest_and_latest_are_the_stored_range_ends():
    assert reset_offset_for(ResetTarget.EARLIEST, 40, 90) == 40
    assert reset_offset_for(ResetTarget.LATEST, 40, 90) == 90


def test_an_offset_must_lie_in_the_stored_range_ends_included():
    assert reset_offset_for(ResetTarget.OFFSET, 40, 90, offset=40) == 40
    assert reset_offset_for(ResetTarget.OFFSET, 40, 90, offset=90) == 90
    for outside in (39, 91):
        with pytest.raises(InvalidArgument, match="40 to 90"):
            reset_offset_for(ResetTarget.OFFSET, 40, 90, offset=outside)
