"""Running a bench's own code against another checkout's ``skiff_broker``, in a child.

A/B benches measure two code trees with one bench code: the child process imports
``skiff_broker`` from the tree it is given and prints, as its last line, a JSON object
that names the tree it imported from; the parent checks that name, so an installed copy
on the path can never stand in for the tree being measured.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path


def run_against(tree: Path, argv: list[str]) -> dict:
    """Run ``python argv...`` importing ``tree``'s broker; the child's last JSON line."""
    # The baseline's bytecode stays out of its tree.
    env = {**os.environ, "PYTHONPATH": str(tree / "broker"), "PYTHONDONTWRITEBYTECODE": "1"}
    out = subprocess.run(
        [sys.executable, *argv], env=env, check=True, capture_output=True, text=True
    ).stdout
    result = json.loads(out.strip().splitlines()[-1])
    if Path(result["tree"]) != tree.resolve():
        raise SystemExit(f"the child imported skiff_broker from {result['tree']}, not {tree}")
    return result


def imported_tree() -> str:
    """The checkout this process's ``skiff_broker`` comes from (for the child's result)."""
    import skiff_broker

    return str(Path(skiff_broker.__file__).resolve().parent.parent.parent)
