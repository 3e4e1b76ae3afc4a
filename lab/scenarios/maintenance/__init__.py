"""Node-b rebooted by maintenance.yml, drained, under the request loop; check mode and site.yml then change nothing."""
