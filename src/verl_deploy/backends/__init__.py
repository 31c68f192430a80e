"""Where a run executes: this host, a Docker container (later: a Ray cluster)."""
