"""A process killed at any point while rewriting a config file never leaves it torn."""

import json
import os
import pathlib
import random
import signal
import subprocess
import sys
import time

import pytest

from skiff_broker.store.atomic_file import write_atomically

# Rewrites the file forever with versions large enough that a kill lands mid-write.
_WRITER = """
import json, sys
from skiff_broker.store.atomic_file import write_atomically
path = sys.argv[1]
version = int(sys.argv[2])
while True:
    version += 1
    doc = {"version": version, "padding": [version] * 20000}
    write_atomically(path, json.dumps(doc).encode())
    print(version, flush=True)
"""


@pytest.mark.crash
def test_sigkill_during_rewrites_leaves_one_whole_version(tmp_path):
    path = str(tmp_path / "consumerOffset.json")
    rng = random.Random(20261121)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    last_seen = 0
    for attempt in range(8):
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, path, str(last_seen)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        acked = int(proc.stdout.readline())  # at least one version is complete
        time.sleep(rng.uniform(0.0, 0.2))
        proc.send_signal(signal.SIGKILL)
        out, _ = proc.communicate()
        lines = out.split()
        acked = int(lines[-1]) if lines else acked
        with open(path, "rb") as f:
            document = json.loads(f.read())
        version = document["version"]
        assert document["padding"] == [version] * 20000, f"attempt {attempt}: torn file"
        # The file holds the last acknowledged version or the one being written.
        assert version in (acked, acked + 1), f"attempt {attempt}: {version} vs {acked}"
        assert version >= last_seen
        last_seen = version


def test_replaces_content_and_leaves_no_temporary_file(tmp_path):
    path = str(tmp_path / "sub" / "topics.json")
    write_atomically(path, b"one")
    write_atomically(path, b"two")
    assert pathlib.Path(path).read_bytes() == b"two"
    assert os.listdir(tmp_path / "sub") == ["topics.json"]
