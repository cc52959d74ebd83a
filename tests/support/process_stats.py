"""What /proc says of another process: its resident memory and the CPU it has used.

For tests and benchmarks that watch a broker process from outside (Linux only).
"""

from __future__ import annotations

import os
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
