"""Small synchronous clients of a Skiff broker (admin API and RocketMQ v2 messaging)."""
