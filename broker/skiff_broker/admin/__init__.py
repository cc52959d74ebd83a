"""Skiff's admin API (skiff.admin.v1): topics, broker state, offsets and look-ups."""
