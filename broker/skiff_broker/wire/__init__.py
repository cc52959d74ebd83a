"""The bottom layer: how a message looks as bytes.

Everything that reads or writes a commit-log record goes through this package:
both write doors, replication, recovery, dispatch, fetch, ``skiff store check``
and the clients' decoder. It imports nothing else of Skiff's, so the store, the
servers and the clients can all depend on it.
"""
