"""Errors the store raises; each message tells the operator what to do."""


class StoreError(Exception):
    """Base class of the store's own errors."""


class StoreCorruptError(StoreError):
    """A file in the data directory is not what the store wrote."""


class DiskFullError(StoreError):
    """The disk holding the data directory has no room for another segment."""


class SegmentWriteError(StoreError):
    """Writing a segment file failed (an I/O error): the disk cannot be trusted."""
