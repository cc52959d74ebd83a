"""What the kernel holds for a local TCP port that its process has not read yet.

A listener whose process is stopped (SIGSTOP) still completes handshakes: the connections
wait in its accept queue, and what their peers send waits in their receive queues. Linux
lists those connections in /proc/net/tcp and /proc/net/tcp6 as ESTABLISHED, with the
unread byte count in ``rx_queue``; a test waits on that count to know that a peer's bytes
have arrived instead of sleeping.
"""

from __future__ import annotations

from pathlib import Path

_TABLES = (Path("/proc/net/tcp"), Path("/proc/net/tcp6"))
_ESTABLISHED = "01"


def unread_bytes_at(port: int) -> int:
    """Bytes received on connections to local ``port`` that nobody has read yet."""
    total = 0
    for table in _TABLES:
        if not table.exists():
            continue
        for line in table.read_text().splitlines()[1:]:
            # sl local_address rem_address st tx_queue:rx_queue ...
            fields = line.split()
            local, state, queues = fields[1], fields[3], fields[4]
            if state == _ESTABLISHED and int(local.rpartition(":")[2], 16) == port:
                total += int(queues.partition(":")[2], 16)
    return total
