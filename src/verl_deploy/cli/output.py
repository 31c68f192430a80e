"""Printing for people (Rich, to the terminal) and programs (--json, to stdout)."""

from __future__ import annotations

import json
import sys
from typing import Any, Iterable

import typer

from verl_deploy.findings import Finding

LEVEL_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


def console(stderr: bool = False):
    from rich.console import Console

    return Console(stderr=stderr, highlight=False, soft_wrap=False)


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def print_findings(findings: Iterable[Finding], *, stderr: bool = True) -> None:
    """One line per finding: `error: field: message — fix: ...`."""
    from rich.markup import escape

    out = console(stderr=stderr)
    for finding in findings:
        style = LEVEL_STYLE[finding.level]
        text = f"[{style}]{finding.level}[/]: [bold]{escape(finding.field)}[/]: {escape(finding.message)}"
        if finding.fix:
            text += f" [dim]— fix:[/] {escape(finding.fix)}"
        out.print(text, soft_wrap=True)  # one finding, one line: the terminal wraps it, never Rich


def fail(findings: list[Finding], *, as_json: bool = False) -> "typer.Exit":
    """Report findings and return the exit to raise (code 1)."""
    if as_json:
        print_json({"ok": False, "findings": [f.as_dict() for f in findings]})
    else:
        print_findings(findings)
    return typer.Exit(code=1)
