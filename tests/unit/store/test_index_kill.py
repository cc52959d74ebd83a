"""An index writer killed at any step of ``put_key``/``put_keys`` loses no key.

A kill is simulated in process: a trace function raises at the chosen line of
``IndexFile.put_key`` or ``IndexFile.put_keys``, so the mapped file keeps exactly the
bytes written up to there (a killed process's mapped pages stay in the page cache). The
files are then opened again as a restart does, the records from the re-dispatch point
on are dispatched again, and every key of every record dispatched must be found.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from skiff_broker.store import index_file
from skiff_broker.store.dispatch_request import DispatchRequest
from skiff_broker.store.index_file import IndexFile
from skiff_broker.store.index_service import IndexService

# Few slots so chains are long and shared; few entries so runs roll over into new files.
SLOTS = 5
ENTRIES = 16
TOPIC = "orders"
_WRITERS = {IndexFile.put_key.__code__, IndexFile.put_keys.__code__, IndexFile._put_lot.__code__}


class Killed(BaseException):
    """The simulated SIGKILL: nothing after it runs."""


@contextlib.contextmanager
def killed_at(step: int) -> Iterator[list[int]]:
    """Raise Killed at the ``step``-th line run inside put_key/put_keys (0: never);
    yields a one-item list that holds the lines run so far."""
    lines = [0]

    def in_writer(frame, event, arg):
        if event == "line":
            lines[0] += 1
            if lines[0] == step:
                raise Killed
        return in_writer

    def on_call(frame, event, arg):
        return in_writer if frame.f_code in _WRITERS else None

    previous = sys.gettrace()
    sys.settrace(on_call)
    try:
        yield lines
    finally:
        sys.settrace(previous)


def requests_of(runs: list[list[tuple[str, ...]]]) -> list[list[DispatchRequest]]:
    """Dispatch runs with increasing commit-log offsets and stamps."""
    result = []
    number = 0
    for run in runs:
        requests = []
        for keys in run:
            requests.append(
                DispatchRequest(
                    TOPIC,
                    0,
                    number,
                    1000 + 100 * number,
                    100,
                    0,
                    1_700_000_000_000 + number,
                    "",
                    list(keys),
                )
            )
            number += 1
        result.append(requests)
    return result


def dispatch(index_dir: Path, runs: list[list[DispatchRequest]], step: int) -> tuple[int, int]:
    """Index ``runs`` in a fresh service until the kill; returns (runs done, lines run)."""
    service = IndexService(str(index_dir), SLOTS, ENTRIES)
    service.load(True, 0)
    done = 0
    with killed_at(step) as lines:
        try:
            for run in runs:
                service.build_run(run)
                done += 1
        except Killed:
            pass
    # The process is gone: nothing is flushed or closed in order.
    for f in service.files:
        f._shut(flush=False)
    return done, lines[0]


def restart_and_finish(
    index_dir: Path, runs: list[list[DispatchRequest]], killed_run: int, redispatch_run: int
) -> IndexService:
    """Open the files again as a store's start does, re-dispatch from the first record of
    ``redispatch_run`` (or from where the index ends, if earlier), then dispatch the rest."""
    service = IndexService(str(index_dir), SLOTS, ENTRIES)
    service.load(True, 0)
    if killed_run >= len(runs):
        return service
    flat = [r for run in runs[: killed_run + 1] for r in run]
    reput = runs[redispatch_run][0].physical_offset
    files = service.files
    reput = min(reput, files[-1].end_phy_offset if files else 0)
    if service.rebuild_from is not None:
        reput = min(reput, service.rebuild_from)
    service.build_run([r for r in flat if r.physical_offset >= reput])
    service.end_rebuild()
    for run in runs[killed_run + 1 :]:
        service.build_run(run)
    return service


def missing_keys(service: IndexService, runs: list[list[DispatchRequest]]) -> list[tuple]:
    missing = []
    for run in runs:
        for r in run:
            for key in r.keys:
                if key and r.physical_offset not in service.query(TOPIC, key, 10_000, 0, 2**62):
                    missing.append((key, r.physical_offset))
    return missing


key_names = st.sampled_from([f"k{n}" for n in range(9)])
records = st.lists(key_names, min_size=1, max_size=3, unique=True).map(tuple)
# Runs of fewer than 24 records go key by key (put_key), longer ones as arrays (put_keys).
workloads = st.lists(
    st.one_of(
        st.lists(records, min_size=1, max_size=4), st.lists(records, min_size=24, max_size=34)
    ),
    min_size=1,
    max_size=4,
)


@settings(
    max_examples=40,
    deadline=None,
    # The explain phase traces lines itself, which would take the kill's trace function away.
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(workload=workloads, data=st.data())
def test_a_kill_at_any_step_of_the_index_writer_loses_no_key(tmp_path_factory, workload, data):
    # Lots small enough that put_keys writes several headers a call, and a load looks
    # at only the newest few entries.
    tail = data.draw(st.sampled_from([3, 8, index_file.TAIL_ENTRIES]), label="tail entries")
    with mock.patch.object(index_file, "TAIL_ENTRIES", tail):
        runs = requests_of(workload)
        _, total = dispatch(tmp_path_factory.mktemp("dry"), runs, 0)
        step = data.draw(st.integers(1, total), label="killed at line")
        index_dir = tmp_path_factory.mktemp("index")
        killed_run, _ = dispatch(index_dir, runs, step)
        last = min(killed_run, len(runs) - 1)
        redispatch_run = data.draw(st.integers(0, last), label="re-dispatch")
        service = restart_and_finish(index_dir, runs, killed_run, redispatch_run)
        try:
            assert missing_keys(service, runs) == []
        finally:
            service.close()


def test_every_step_of_a_put_keys_run_that_fills_a_file(tmp_path):
    """Each line of the writer in turn, for a put_key run, then a put_keys run that fills
    the file and goes on in the next one."""
    runs = requests_of(
        [[(f"k{n}",) for n in range(3)], [(f"k{n % 7}", f"j{n % 3}") for n in range(26)]]
    )
    _, total = dispatch(tmp_path / "dry", runs, 0)
    assert total > 40
    for step in range(1, total + 1):
        index_dir = tmp_path / f"step-{step}"
        killed_run, _ = dispatch(index_dir, runs, step)
        service = restart_and_finish(index_dir, runs, killed_run, min(killed_run, len(runs) - 1))
        try:
            assert missing_keys(service, runs) == [], f"killed at line {step} of {total}"
        finally:
            service.close()
