"""`verl-deploy _supervise RUN` (hidden): the detached supervisor a launch starts (runs/supervisor.py)."""

from __future__ import annotations

from verl_deploy.cli import app
from verl_deploy.runs.supervisor import supervise


@app.command("_supervise", hidden=True)
def supervise_command(run_id: str) -> None:
    supervise(run_id)
