"""One fixed-width big-endian field of many records at once, as a numpy array.

Records lie back to back at irregular places, so no ordinary array holds one field of
each. An array whose items overlap does: with a stride of one byte, item ``p`` is the
field that starts at byte ``p``, and reading the field of every record is one gather at
the records' starts plus the field's offset. Nothing is copied but the fields read.
"""

from __future__ import annotations

import mmap

import numpy as np


def fields_at(
    buf: bytes | memoryview | mmap.mmap, end: int, positions: np.ndarray, dtype: str
) -> np.ndarray:
    """The big-endian integers of ``dtype`` (``">i4"``, ``">u2"``, ...) that start at each of
    ``positions`` within ``buf[:end]``, as native 64-bit integers.

    A position whose field would pass ``end`` raises IndexError: nothing is read there.
    """
    kind = np.dtype(dtype)
    items = max(end - kind.itemsize + 1, 0)
    overlapping = np.ndarray((items,), dtype=kind, buffer=buf, strides=(1,))
    return overlapping[positions].astype(np.int64)
