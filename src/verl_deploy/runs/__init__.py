"""Runs: launched trainings with a record on disk, a supervisor, and recovery."""
