"""Broker metadata kept beside the store: topic configs and consumer-group offsets."""
