"""`verl-deploy stop`: end a run's training and the Ray it started; checkpoints are kept."""

from __future__ import annotations

import sys
from typing import Optional

import typer
from rich.markup import escape

from verl_deploy.cli import app
from verl_deploy.cli.one_run import find
from verl_deploy.cli.output import console, fail
from verl_deploy.findings import error
from verl_deploy.rayauth import AuthError
from verl_deploy.runs.record import TERMINAL, RecordError, RunRecord, list_runs
from verl_deploy.runs.stopping import stop_damaged, stop_run


def _newest_live(yes: bool) -> str:
    """`stop` without a run id: the newest live run, as `status`/`logs` default to the newest run; with several
    live, ask (or, off a terminal without --yes, refuse and name them)."""
    live = []
    for run_id in list_runs():
        try:
            if RunRecord.load(run_id).state not in TERMINAL:
                live.append(run_id)
        except RecordError:
            continue
    if not live:
        raise fail([error("run", "no live run to stop", "see `verl-deploy runs`; a damaged run is stopped by its id")])
    if len(live) == 1 or yes:
        return live[0]
    others = ", ".join(live[1:4]) + (f" and {len(live) - 4} more" if len(live) > 4 else "")
    if not sys.stdin.isatty():  # nothing to confirm with: a usage matter (exit 2), nothing was stopped
        fail([error("run", f"{len(live)} runs are live (newest {live[0]}; also {others})",
                    f"name the run (`verl-deploy stop {live[0]}`), or pass --yes to stop the newest")])
        raise typer.Exit(code=2)
    if not typer.confirm(f"{len(live)} runs are live; stop the newest, {live[0]} (also live: {others})?"):
        raise typer.Exit(code=1)
    return live[0]


@app.command("stop")
def stop_command(run_id: Optional[str] = typer.Argument(None, metavar="[RUN]", help="Run id or prefix (default: the "
                                                        "newest live run)."),
                 yes: bool = typer.Option(False, "--yes", "-y", help="With no RUN and several live runs: stop the "
                                          "newest without asking.")) -> None:
    """Stop the training and the Ray session this tool started for it; checkpoints are kept."""
    found = find(run_id) if run_id is not None else _newest_live(yes)
    try:
        record = RunRecord.load(found)
    except RecordError as exc:
        console(stderr=True).print(f"[yellow]warning[/]: {escape(str(exc))}", soft_wrap=True)
        console().print(f"run {found}: {stop_damaged(found, str(exc))}")
        return
    if record.state in TERMINAL:
        console().print(f"run {record.id} already {record.state}")
        return
    try:
        why = stop_run(record)
    except AuthError as exc:  # the cluster refused us: its job may still run
        raise fail([error("stop", f"run {record.id} was not stopped (it goes on): {exc.problem}",
                          f"{exc.fix}, then `verl-deploy stop {record.id}` again")]) from None
    if why:
        console().print(f"run {record.id}: {escape(why)}; it was not signalled (the training had already "
                        "ended); the run is marked stopped", soft_wrap=True)
    console().print(f"run {record.id} stopped (checkpoints kept in {record.spec.get('ckpts_dir') or 'the checkpoint directory'})")
