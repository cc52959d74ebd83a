"""What every gRPC service of the broker shares at its edge.

undecodable  requests that do not parse reach handlers as values
boundary     the one place a handler's failure becomes an answer
peers        the caller's address, as records store it
health_service  the standard health service's name (served, and passed unsigned)
"""
