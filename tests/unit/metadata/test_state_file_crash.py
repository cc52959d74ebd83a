"""A process killed at any point while rewriting a state file leaves it and its .bak whole."""

import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest

# Rewrites offsets forever through StateFile, each version large enough that a kill lands
# mid-write; prints each version once it is written.
_WRITER = """
import sys
from skiff_broker.metadata.state_file import StateFile
state = StateFile(sys.argv[1], lost="offsets")
version = int(sys.argv[2])
while True:
    version += 1
    state.write({"version": version, "padding": [version] * 20000})
    print(version, flush=True)
"""


def _read(path: str) -> dict:
    with open(path, "rb") as f:
        return json.loads(f.read())


@pytest.mark.crash
def test_sigkill_during_rewrites_leaves_the_file_and_its_bak_whole(tmp_path):
    path = str(tmp_path / "consumerOffset.json")
    rng = random.Random(20261125)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    last_seen = 0
    for attempt in range(8):
        proc = subprocess.Popen(
            [sys.executable, "-c", _WRITER, path, str(last_seen)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        # Two versions complete: the second write made the .bak.
        proc.stdout.readline()
        proc.stdout.readline()
        time.sleep(rng.uniform(0.0, 0.2))
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
        main, backup = _read(path), _read(f"{path}.bak")
        for document in (main, backup):
            assert document["padding"] == [document["version"]] * 20000, f"attempt {attempt}"
        # The .bak is the version before the file's, or the same one when the kill came
        # between keeping the old version and putting the new one in place.
        assert main["version"] - backup["version"] in (0, 1), f"attempt {attempt}"
        assert main["version"] >= last_seen
        last_seen = main["version"]
