"""`verl-deploy clean RUN`: after a crash, end what that run left running (its Ray, servers, device holders)."""

from __future__ import annotations

import typer

from verl_deploy.cli import app

EPILOG = """\
Examples:

  verl-deploy clean 20261130-1942          # after a crash: what the run left running, ended and listed
  verl-deploy clean 20261130-1942 --json

Only processes carrying a mark the run recorded when it started are ended: the VD_LOG entry of its
environment (every descendant inherits it, also daemons and servers that left the process group),
its Ray session and temp dir, its process group (checked against the recorded start time). Other
runs' and other users' processes are never touched, and nothing is found by name. Also inside the
run's container and on the other nodes of a multi-node run (over SSH). A run still supervised is
refused: `verl-deploy stop RUN` first.
"""


@app.command("clean", epilog=EPILOG)
def clean_command(run_id: str = typer.Argument(..., metavar="RUN", help="Run id or prefix."),
                  json_output: bool = typer.Option(False, "--json", help="Print what was freed as JSON.")) -> None:
    """After a crash: end what the run left behind on every node (its Ray, vLLM/SGLang servers, device holders)."""
    from rich.markup import escape

    from verl_deploy.cli.output import console, fail, print_json
    from verl_deploy.cli.one_run import load
    from verl_deploy.findings import error
    from verl_deploy.runs.clean import CleanRefused, clean_run

    record = load(run_id, json_output)
    try:
        result = clean_run(record)
    except CleanRefused as exc:
        raise fail([error("run", str(exc), f"`verl-deploy stop {record.id}`")], as_json=json_output) from None
    document = result.as_dict()
    if json_output:
        print_json({"ok": not document["still_running"], **document})
    else:
        out = console()
        for note in result.notes:
            out.print(f"note: {escape(note)}", soft_wrap=True)
        for freed in result.freed:
            held = f" holding {', '.join(freed.devices)}" if freed.devices else ""
            state = "ended" if freed.ended else "[red]still running[/]"
            out.print(f"{state}: {escape(freed.node)} pid {freed.pid} ({escape(freed.mark)}){escape(held)}: "
                      f"{escape(freed.command[:120])}", soft_wrap=True)
        devices = document["devices_freed"]
        out.print(f"run {record.id}: {len(result.freed)} process(es) freed" +
                  (f", devices {', '.join(devices)}" if devices else "") + ("" if result.freed else " (nothing was left)"))
    if document["still_running"]:
        raise typer.Exit(code=1)
