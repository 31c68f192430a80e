"""`verl-deploy runs`: the runs this host launched, newest first."""

from __future__ import annotations

import os

import typer
from rich.markup import escape
from rich.table import Table

from verl_deploy.cli import app
from verl_deploy.cli.output import console, print_json
from verl_deploy.runs.record import RecordError, RunRecord, list_runs
from verl_deploy.views.safe_text import neutralise


@app.command("runs")
def runs_command(json_output: bool = typer.Option(False, "--json", help="Print as JSON.")) -> None:
    """List the runs this host launched, newest first (a damaged record is listed as such, the others still shown)."""
    records, damaged = [], []
    for run_id in list_runs():
        try:
            records.append(RunRecord.load(run_id))
        except RecordError as exc:
            damaged.append({"id": run_id, "problem": f"{run_id}: {exc}"})
    if json_output:
        print_json({"runs": [r.status_document() for r in records], "damaged": damaged})
        return
    table = Table(box=None, header_style="bold")
    for column in ("id", "state", "step", "attempts", "backend", "model"):
        table.add_column(column)
    for r in records:
        step = f"{r.step}/{r.total_steps}" if r.total_steps else str(r.step)
        table.add_row(r.id, r.state, step, str(len(r.attempts)), r.backend,
                      escape(neutralise(os.path.basename(str(r.spec.get("model_path") or "")))))
    for d in damaged:
        table.add_row(d["id"], "[red]damaged[/]", "-", "-", "-", "-")
    console().print(table if records or damaged else "no runs yet: start one with `verl-deploy launch`")
    for d in damaged:
        console(stderr=True).print(f"[yellow]warning[/]: {escape(d['problem'])}; `verl-deploy stop {d['id']}` still stops it",
                                   soft_wrap=True)
