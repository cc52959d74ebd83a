"""The composition root: the one place that builds a running broker from its parts.

``broker_server`` recovers the store, starts every door (the client port, remoting,
replication, metrics) and stops them on a signal; ``health`` is what the health service
reports through that life; ``slow_callbacks`` is the event loop's report of held turns.

Invariant: nothing imports this package but ``cli.py`` (it sits above every service and
door in the layer contract of pyproject.toml).
"""
