"""Options and offset arithmetic of the Spark data source (no Spark needed)."""

from __future__ import annotations

import pytest

from skiff_broker.spark.offsets import DataLossError, QueueSlice, rate_limited, slices
from skiff_broker.spark.options import EARLIEST, LATEST, OptionError, parse_source_options

BASE = {"endpoints": "127.0.0.1:8081", "topic": "orders"}


def test_offsets_json_per_queue_and_defaults():
    options = parse_source_options(
        {**BASE, "startingOffsets": '{"orders": {"0": 42, "3": -2}}', "endingoffsets": "latest"}
    )
    assert options.starting.per_queue == {"orders": {"0": 42, "3": EARLIEST}}
    assert options.starting.default == EARLIEST
    assert options.ending.default == LATEST and not options.ending.per_queue
    assert options.fail_on_data_loss is True
    assert options.max_offsets_per_trigger is None


def test_timestamps_and_switches():
    options = parse_source_options(
        {**BASE, "startingTimestamp": "1700000000000", "maxOffsetsPerTrigger": "500",
         "failOnDataLoss": "False"}
    )  # fmt: skip
    assert options.starting.by_timestamp and options.starting.timestamp == 1_700_000_000_000
    assert options.max_offsets_per_trigger == 500
    assert options.fail_on_data_loss is False


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        ({"endpoints": ""}, 'option "endpoints" is missing'),
        ({"endpoints": "localhost"}, "is not HOST:PORT"),
        ({"topic": ""}, "no topic to read"),
        ({"startingOffsets": "[1]"}, "startingOffsets must be JSON like"),
        ({"startingOffsets": '{"other": {"0": 1}}'}, "names topic 'other', which is not read"),
        ({"startingOffsets": '{"orders": {"0": -3}}'}, "use an offset, -1"),
        ({"endingOffsets": "earliest"}, 'endingOffsets cannot be "earliest"'),
        ({"endingOffsets": '{"orders": {"0": -2}}'}, "use an offset, -1 (latest)"),
        ({"startingOffsets": "latest", "startingTimestamp": "1"}, "set only one of"),
        ({"maxOffsetsPerTrigger": "0"}, "must be a positive integer"),
        ({"failOnDataLoss": "maybe"}, "must be true or false"),
        ({"pullBatchSize": "70000"}, "at most 65536"),
    ],
)
def test_bad_options_say_how_to_fix_them(extra, message):
    with pytest.raises(OptionError) as caught:
        parse_source_options({**BASE, **extra})
    assert message in str(caught.value)


def test_rate_limit_shares_by_backlog_and_never_exceeds_it():
    start = {"a": {"0": 0, "1": 100}, "b": {"0": 10}}
    end = {"a": {"0": 300, "1": 200}, "b": {"0": 10}}
    limited = rate_limited(start, end, 100)
    # 300 and 100 waiting: 75 and 25; nothing waiting in b.
    assert limited == {"a": {"0": 75, "1": 125}, "b": {"0": 10}}
    assert rate_limited(start, end, 1000) == end
    # Rounding leftovers still use the whole limit.
    odd = rate_limited({"t": {"0": 0, "1": 0, "2": 0}}, {"t": {"0": 5, "1": 5, "2": 5}}, 4)
    assert sum(odd["t"].values()) == 4


def test_slices_are_exclusive_ranges_and_a_shrunken_queue_is_data_loss():
    start = {"t": {"g-a/0": 5, "g-a/1": 7, "g-b/0": 0}}
    assert slices(start, {"t": {"g-a/0": 9, "g-a/1": 7, "g-b/0": 4}}, fail_on_data_loss=True) == [
        QueueSlice("t", "g-a", 0, 5, 9),
        QueueSlice("t", "g-b", 0, 0, 4),
    ]
    with pytest.raises(DataLossError, match="failOnDataLoss"):
        slices(start, {"t": {"g-a/0": 3, "g-a/1": 7}}, fail_on_data_loss=True)
    assert slices(start, {"t": {"g-a/0": 3, "g-a/1": 7}}, fail_on_data_loss=False) == []
