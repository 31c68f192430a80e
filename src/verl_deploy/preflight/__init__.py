"""Preflight: probe the host (or the run's container) and turn what is found into facts and findings."""
