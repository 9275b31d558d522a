"""Releases: build a release directory, install it into a prefix, switch and roll back, self-update."""
