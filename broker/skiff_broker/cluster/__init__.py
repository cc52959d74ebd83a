"""The cluster: every group of one Broker, who masters each, and routes across them."""
