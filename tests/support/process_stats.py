"""What /proc says of another process: its resident memory and the CPU it has used.

For tests and benchmarks that watch a broker process from outside (Linux only).
"""

from __future__ import annotations

import os
import threading
from pathlib import Path


def resident_bytes(pid: int) -> int:
    """The process's resident set size (VmRSS)."""
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError(f"no VmRSS in /proc/{pid}/status")


def cpu_seconds(pid: int) -> float:
    """User plus system CPU time of every thread of the process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    # After the command name: state is field 3, utime and stime are fields 14 and 15.
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


class ResidentWatch:
    """A process's resident memory sampled from a thread of its own while the block runs:
    the first sample (``before``), the highest (``peak``) and, once the block has ended,
    one more (``after``). Each sample is a read of /proc, nothing depends on how many."""

    def __init__(self, pid: int, every_s: float = 0.05) -> None:
        self._pid = pid
        self._every_s = every_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._sample_until_stopped, daemon=True)
        # The sampling thread and the test's own samples both raise the peak.
        self._peak_lock = threading.Lock()
        self.before = self.peak = self.after = resident_bytes(pid)

    def __enter__(self) -> ResidentWatch:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _sample_until_stopped(self) -> None:
        while not self._stop.wait(self._every_s):
            self.sample()

    def sample(self) -> int:
        """One sample, taken now (a test may add its own at moments it knows matter)."""
        rss = resident_bytes(self._pid)
        with self._peak_lock:
            self.peak = max(self.peak, rss)
        return rss

    def settled(self) -> int:
        """One more sample, taken now (after the attack): it is ``after``."""
        self.after = self.sample()
        return self.after

    def report(self) -> str:
        mib = 1 << 20
        return (
            f"RSS before {self.before / mib:.0f} MiB, peak {self.peak / mib:.0f} MiB, "
            f"after {self.after / mib:.0f} MiB"
        )
