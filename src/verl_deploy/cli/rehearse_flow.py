"""`plan --rehearse`: what the rehearsal (runs/rehearse.py) of `launch --rehearse` would change."""

from __future__ import annotations


def rehearsal_view(spec) -> dict:
    """What `launch --rehearse` would change, for `plan --rehearse`."""
    from verl_deploy.runs.rehearse import rehearsal_changes

    return rehearsal_changes(spec)
