"""Printing for people (Rich, to the terminal) and programs (--json, to stdout)."""

from __future__ import annotations

import json
import sys
from typing import IO, Any, Iterable, cast

import typer

from verl_deploy.findings import Finding

LEVEL_STYLE = {"error": "bold red", "warning": "yellow", "info": "cyan"}


# Off a terminal (a pipe, a file, an agent) lines are never wrapped: a path or a command stays on one
# line, whole, for grep and for programs. Rich would otherwise wrap at 80 columns (or $COLUMNS).
OFF_TERMINAL_WIDTH = 100_000


def console(stderr: bool = False):
    """Rich console for people. On a terminal: its width and colours. Off one: no wrapping, no colour
    (so nothing may mean something by colour alone: states are words, `on`/`off`)."""
    from rich.console import Console

    out = Console(stderr=stderr, highlight=False, soft_wrap=False)
    if not out.is_terminal:  # tables pad every cell to the widest row: off a terminal no line ends in spaces
        stream = cast(IO[str], Unpadded(sys.stderr if stderr else sys.stdout))  # write/flush/isatty: all Rich uses
        out = Console(file=stream, highlight=False, soft_wrap=False,
                      width=OFF_TERMINAL_WIDTH, no_color=True, color_system=None)
    return out


class Unpadded:
    """A text stream that drops the spaces at the end of each line it passes on (Rich writes whole lines)."""

    def __init__(self, stream) -> None:
        self.stream = stream
        self.pending = ""

    def write(self, text: str) -> int:
        lines = (self.pending + text).split("\n")
        self.pending = lines.pop()
        if lines:
            self.stream.write("".join(line.rstrip(" ") + "\n" for line in lines))
        return len(text)

    def flush(self) -> None:
        if self.pending:
            self.stream.write(self.pending)
            self.pending = ""
        self.stream.flush()

    def isatty(self) -> bool:
        return False

    @property
    def encoding(self) -> str:
        return getattr(self.stream, "encoding", None) or "utf-8"

    def fileno(self) -> int:
        return self.stream.fileno()


def print_json(data: Any) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")


def print_findings(findings: Iterable[Finding], *, stderr: bool = True) -> None:
    """One line per finding: `error: field: message — fix: ...`."""
    from rich.markup import escape as rich_escape

    from verl_deploy.views.safe_text import neutralise

    def escape(text: str) -> str:  # a message may quote a log, a path, a value: inert on the terminal
        return rich_escape(neutralise(text))

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
