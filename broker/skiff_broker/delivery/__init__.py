"""How messages reach consumers: pop with invisible time, delays, transactions, long polling."""
