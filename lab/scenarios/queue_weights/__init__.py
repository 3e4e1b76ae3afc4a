"""The controller in weights mode sets the route's weights from the replicas' measured speeds and their queues."""
