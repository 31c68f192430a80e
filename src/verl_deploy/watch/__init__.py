"""Watching a verl log: follow it as it grows and turn lines into events."""
