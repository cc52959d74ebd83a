"""The message store: commit log, consume queues, index, flush, recovery, retention.

The bottom layer above ``wire/``: it imports nothing else of the broker (an
import-linter contract in pyproject.toml checks that).
"""
