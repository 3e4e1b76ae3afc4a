"""The controller in sleep mode puts an idle replica to sleep, the route answers meanwhile, and a burst wakes it."""
