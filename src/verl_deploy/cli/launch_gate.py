"""What the gates of a launch found (runs/gate.py), shown: `launch --dry-run`, `plan --check`, a refused `launch`.

One JSON document on stdout with --json (the plan, ok, every finding, the blockers, the check, verify), else
one line per finding and a verdict.
"""

from __future__ import annotations

from typing import Any

import typer

from verl_deploy.cli.output import console, print_findings, print_json
from verl_deploy.render import plan_document
from verl_deploy.runs.gate import Gate


def document(gate: Gate, *, dry_run: bool) -> dict:
    """The one JSON document of `launch --dry-run` / `plan --check` (and of a refused launch)."""
    data: dict[str, Any] = {}
    prepared = gate.prepared
    if prepared is not None and prepared.plan is not None:
        data = plan_document(prepared.plan, gate.findings, prepared.checked_against, prepared.memory)
        data["command"] = ["python3", *prepared.plan.argv()]
    data["ok"] = gate.ok
    data["dry_run"] = dry_run
    data["backend"] = gate.chosen
    data["findings"] = [f.as_dict() for f in gate.ordered()]
    data["blockers"] = [f.as_dict() for f in gate.blockers]
    if gate.checked is not None:
        data["check"] = gate.checked.as_dict()
    if gate.verified is not None:
        data["verify"] = gate.verified.as_dict()
    return data


def report(gate: Gate, *, as_json: bool, dry_run: bool) -> None:
    """Print the gate's outcome: one JSON document, or one line per finding and a verdict."""
    if as_json:
        print_json(document(gate, dry_run=dry_run))
        return
    print_findings([f for f in gate.ordered() if dry_run or f.level != "info"], stderr=not dry_run)
    out = console(stderr=not dry_run)
    count = len(gate.blockers)
    if gate.ok:
        out.print(f"[bold green]launch would start[/] ({gate.chosen} backend)" if dry_run else "")
    else:
        out.print(f"[bold red]launch {'would be' if dry_run else 'was'} refused[/]: {count} blocker(s), listed above "
                  "(each names the field and the fix)", soft_wrap=True)


def refuse(gate: Gate, *, as_json: bool) -> "typer.Exit":
    report(gate, as_json=as_json, dry_run=False)
    return typer.Exit(code=1)
