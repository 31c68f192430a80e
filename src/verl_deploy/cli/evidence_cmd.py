"""`verl-deploy evidence RUN`: stack dumps, devices and log tails of a running training, now."""

from __future__ import annotations

import json
from typing import Optional

import typer

from verl_deploy.cli import app

EPILOG = """\
Examples:

  verl-deploy evidence                 # the newest run
  verl-deploy evidence 20261130-1942 --json

Writes runs/<id>/evidence/<time>/: stacks/<pid>-<name>.txt (py-spy dump --nonblocking of the
trainer and its Ray workers: the training is neither paused nor stopped), devices.txt
(npu-smi / nvidia-smi), ray-status.txt, logs/ (tails of the attempt log and the Ray worker logs),
summary.json. The supervisor does the same by itself when it declares a stall.
"""


@app.command("evidence", epilog=EPILOG)
def evidence_command(run_id: Optional[str] = typer.Argument(None, metavar="[RUN]", help="Run id or prefix (default: newest)."),
                     json_output: bool = typer.Option(False, "--json", help="Print the summary as JSON.")) -> None:
    """Collect what a hang needs (stack dumps, devices, log tails) without touching the run."""
    from verl_deploy.cli.output import console, fail, print_json
    from verl_deploy.findings import error
    from verl_deploy.runs.evidence import collect
    from verl_deploy.runs.record import RecordError, RunRecord, find_run

    found = find_run(run_id)
    if found is None:
        raise fail([error("run", f"no run {run_id!r}" if run_id else "no runs yet", "see `verl-deploy runs`")],
                   as_json=json_output)
    try:
        record = RunRecord.load(found)
    except (RecordError, OSError, ValueError, TypeError, KeyError) as exc:
        raise fail([error("run", f"the record of {found} cannot be read ({exc})", "see `verl-deploy runs`")],
                   as_json=json_output)
    folder = collect(record, "asked for with `verl-deploy evidence`")
    summary = json.loads((folder / "summary.json").read_text())
    if json_output:
        print_json({"folder": str(folder), **summary})
        return
    out = console()
    out.print(f"evidence of run {record.id} (step {record.step}, {record.state}) in [bold]{folder}[/] "
              f"({summary['seconds']} s)")
    for dump in summary["stacks"]:
        out.print(f"  stack {dump['pid']} {dump['name']}: " + (dump["file"] or f"[yellow]{dump['error']}[/]"),
                  markup=True, highlight=False)
    for problem in summary["problems"]:
        out.print(f"  [yellow]{problem}[/]")
