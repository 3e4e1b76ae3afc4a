"""Partial failures (a node cut off mid-run, a refused drain, a dead worker) and what they leave of the route."""
