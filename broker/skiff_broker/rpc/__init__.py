"""What every gRPC service of the broker shares at its edge: undecodable requests
reach handlers as values, and one boundary turns a handler's failure into an answer."""
