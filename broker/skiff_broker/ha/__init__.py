"""Master/replica replication: a replica holds a byte-identical copy of its master's commit log."""
