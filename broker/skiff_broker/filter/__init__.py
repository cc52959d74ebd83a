"""Message filters: tag expressions and SQL92 property filters, compiled once per subscription."""
