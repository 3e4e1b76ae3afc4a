"""The lab: what stands in for real nodes on one machine without GPUs (docs/lab.md). Not part of the collection:
the built tarball leaves this folder out, and nothing under plugins/ or roles/ imports it."""
