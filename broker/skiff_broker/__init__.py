"""Skiff: a RocketMQ-compatible message broker."""

__version__ = "0.1.0"
