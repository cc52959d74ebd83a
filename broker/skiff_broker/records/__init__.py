"""Skiff's record API (skiff.records.v1): stored records of a queue, many per call."""
