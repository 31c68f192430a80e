"""What the commands about one run share: finding it by id or prefix, loading its record with one line for a
damaged one, and what `launch` and `resume` print once it started."""

from __future__ import annotations

import time
from typing import Optional

import typer
from rich.markup import escape

from verl_deploy.cli.output import console, fail, print_json
from verl_deploy.findings import error
from verl_deploy.runs.record import RecordError, RunRecord, find_run, list_runs, reload
from verl_deploy.views.safe_text import neutralise


def say(text: str) -> None:
    """A progress line of a stage, on stderr, dim."""
    console(stderr=True).print(f"[dim]{text}[/]")


def find(run_id: Optional[str], as_json: bool = False) -> str:
    """The run's id from an exact id, a unique prefix or (None) the newest; one finding and exit 1 otherwise."""
    found = find_run(run_id)
    if found is None and run_id:
        matches = [i for i in list_runs() if i.startswith(run_id)]
        if len(matches) > 1:
            shown = ", ".join(matches[:5]) + (f" and {len(matches) - 5} more" if len(matches) > 5 else "")
            raise fail([error("run", f"{run_id!r} matches {len(matches)} runs: {shown}",
                              "give more of the run id")], as_json=as_json)
    if found is None:
        raise fail([error("run", f"no run {run_id!r}" if run_id else "no runs yet",
                          "see `verl-deploy runs`" if run_id else "start one with `verl-deploy launch`")],
                   as_json=as_json)
    return found


def load(run_id: Optional[str], as_json: bool = False) -> RunRecord:
    """The run's record, or one line saying what is wrong with it (and that `stop` still works)."""
    found = find(run_id, as_json)
    try:
        return RunRecord.load(found)
    except RecordError as exc:
        raise fail([error("run", f"{found}: {exc}", f"`verl-deploy stop {found}` still stops its training")],
                   as_json=as_json) from None


def after_start(record: RunRecord, follow: bool, json_output: bool) -> None:
    """What launch and resume print once the run started: its status, or (with --follow) its end."""
    if follow:
        from verl_deploy.cli.watch_view import follow_run

        record = follow_run(record.id, quiet=json_output)
        if json_output:
            print_json(record.status_document())
        else:
            show_end(record)
        raise typer.Exit(code=0 if record.state == "succeeded" else 1)
    if json_output:
        print_json(record.status_document())
        return
    _announce(record)


def show_end(record: RunRecord) -> None:
    """The end of a followed run: the cause, the evidence line, and the next step as a command to copy."""
    from verl_deploy.runs.next_step import end_lines

    out = console()
    for line in end_lines(record):
        out.print(escape(neutralise(line)), soft_wrap=True)


def _announce(record: RunRecord) -> None:
    out = console()
    out.print(f"run [bold]{record.id}[/] is {record.state} ({record.backend})")
    out.print(f"log: {escape(neutralise(record.current.log if record.current else ''))}")
    deadline = time.monotonic() + 5
    while not record.swanlab_url and record.state == "running" and time.monotonic() < deadline:
        time.sleep(0.25)
        record = reload(record)
    if record.swanlab_url:
        out.print(f"SwanLab: [bold]{escape(neutralise(record.swanlab_url))}[/]")
    out.print(f"follow: verl-deploy logs {record.id} -f   ·   status: verl-deploy status {record.id}   ·   "
              f"stop: verl-deploy stop {record.id}")
