"""`verl-deploy diagnose LOGFILE`: what a verl log says — progress, metrics, link, and why it failed."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from verl_deploy.cli import app

if TYPE_CHECKING:
    from verl_deploy.watch.scan import LogScanner

EPILOG = """\
Examples:

  verl-deploy diagnose train.log                 # the verdict: class, phase, cause, fix, lines, progress

  verl-deploy diagnose train.log --json          # the same as one JSON object ("class" is null when healthy)

  verl-deploy diagnose train.log --follow        # keep reading; print events as they come (Ctrl-C to stop)

  ray job logs raysubmit_XYZ | verl-deploy diagnose -

Exit status: 0 when no failure is found (warnings allowed), 1 when the log shows a failure,
2 when the log cannot be read.
"""


def _emit_line(text: str) -> None:
    """One line to stdout; what came from the log is neutralised (no terminal escapes)."""
    from verl_deploy.views.safe_text import neutralise

    sys.stdout.write(neutralise(text) + "\n")
    sys.stdout.flush()


def _print_diagnosis(result, source: str) -> None:
    from rich.markup import escape as rich_escape
    from rich.table import Table

    from verl_deploy.cli.output import console
    from verl_deploy.views.safe_text import neutralise
    from verl_deploy.watch.describe import describe
    from verl_deploy.watch.events import Metrics

    def escape(text: str) -> str:  # everything here may come from the log: inert, then no markup
        return rich_escape(neutralise(text))

    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True)
    grid.add_column(overflow="fold")
    grid.add_row("log", f"{escape(source)} · {result.lines_read:,} lines")
    if result.total_steps:
        grid.add_row("progress", f"step {result.step}/{result.total_steps} ({100 * result.step / result.total_steps:.0f}%)")
    elif result.step:
        grid.add_row("progress", f"step {result.step}")
    if result.metrics:
        grid.add_row("metrics", escape(describe(Metrics(result.step, result.metrics)).split(": ", 1)[1]))
    if result.last_checkpoint_step is not None:
        grid.add_row("checkpoint", f"step {result.last_checkpoint_step}")
    if result.swanlab_url:
        grid.add_row("SwanLab", escape(result.swanlab_url))
    if result.lines_skipped:
        first = result.first_skipped
        where = f"line {first.line}: " if first and first.line else ""
        grid.add_row("skipped", f"{result.lines_skipped:,} line(s) could not be read"
                     + (f" (first: {escape(where + first.why)})" if first else ""))
    if result.class_id is None:
        grid.add_row("verdict", "[green]no failure found[/]")
        console().print(grid)
        return
    phase = f" during {result.phase_label}" if result.phase_label else ""
    if result.failed:
        label = f"[bold red]{result.class_id}[/]"
        retry = {True: "an automatic retry makes sense", False: "do not retry as is", None: ""}[result.retryable]
    elif result.survived:  # fatal where it was printed, but the scripts went on past it
        label, retry = f"[yellow]survived {result.class_id}[/]", "before the hand-over; the scripts went on past it"
    else:  # said in words too: a pipe shows no colour, and nothing failed to retry
        label, retry = f"[yellow]warning {result.class_id}[/]", "nothing failed; the run may go on"
    grid.add_row("verdict", f"{label}: {escape(result.title)}{escape(phase)}" + (f" [dim]({retry})[/]" if retry else ""))
    grid.add_row("cause", escape(result.cause))
    grid.add_row("fix", escape(result.fix))
    for index, hit in enumerate(result.lines):
        grid.add_row("lines" if index == 0 else "", f"[dim]{hit.line}:[/] {escape(hit.text)}")
    _also_seen(grid, result)
    console().print(grid)


def _also_seen(grid, result) -> None:
    """The other classes, each kind on its own line: only a failure of the training is called a symptom."""
    from rich.markup import escape

    symptoms = [c for c in result.secondary if c not in result.secondary_warnings + result.secondary_survived]
    for names, why in ((symptoms, "usually symptoms of the above"),
                       (result.secondary_survived, "before the hand-over; the scripts went on past it"),
                       (result.secondary_warnings, "warnings: nothing failed there")):
        if names:
            grid.add_row("also seen", f"{escape(', '.join(names))} [dim]({why})[/]")


@app.command("diagnose", epilog=EPILOG)
def diagnose_command(
    logfile: str = typer.Argument(..., metavar="LOGFILE", help="A verl log file, or - for standard input."),
    json_output: bool = typer.Option(False, "--json", help="Print one JSON object (with --follow: one per event, then the verdict)."),
    follow: bool = typer.Option(False, "--follow", "-f", help="Keep reading as the log grows and print events as they come."),
    idle_exit: float = typer.Option(None, "--idle-exit", metavar="SECONDS",
                                    help="With --follow: stop after this long without a new byte."),
    stall_minutes: float = typer.Option(10.0, "--stall-minutes", min=0.1,
                                        help="With --follow: report a stall after max(this, 5 x median step time) without a new step."),
) -> None:
    """Read a verl log and say what happened: progress, metrics, SwanLab link, and the root cause of a failure with its fix."""
    from verl_deploy.cli.output import print_json
    from verl_deploy.findings import error
    from verl_deploy.watch.diagnosis import diagnose
    from verl_deploy.watch.scan import LogScanner

    if idle_exit is not None and not idle_exit >= 0:  # also NaN
        raise _refusal(error("--idle-exit", f"{idle_exit} is not a number of seconds >= 0",
                             "pass --idle-exit 0 or more (or leave it out to follow until Ctrl-C)"), json_output)
    reader, source = _open_log(logfile, follow, json_output)
    live = LiveEvents(json_output)
    scanner = LogScanner(eager=follow, on_event=live)
    live.scanner = scanner
    try:
        if follow:
            _follow(reader, scanner, live, source, idle_exit, stall_minutes)
        else:
            from verl_deploy.watch.reader import scan_to_end

            scan_to_end(reader, scanner)
    except KeyboardInterrupt:
        pass
    except OSError as exc:
        raise _refusal(error("LOGFILE", f"cannot read {source}: {exc.strerror or exc}",
                             "check the path and permissions"), json_output) from None
    not_a_log = None if follow else _not_a_verl_log(None if logfile == "-" else Path(logfile).expanduser(), scanner.lines)
    if not_a_log:
        raise _refusal(error("LOGFILE", f"{source} has no verl log lines: {not_a_log}",
                             "pass the verl training log (the file start_verl.sh's output went to)"), json_output)
    result = diagnose(scanner)
    if json_output and follow:
        _emit_line(json.dumps({"event": "diagnosis", **result.as_dict()}, default=str))
    elif json_output:
        print_json(result.as_dict())
    else:
        _print_diagnosis(result, source)
    raise typer.Exit(code=1 if result.failed else 0)


def _refusal(finding, json_output: bool) -> typer.Exit:
    """The refusal on stderr, and with --json as the JSON document on stdout too."""
    from verl_deploy.cli.output import print_findings, print_json

    print_findings([finding])
    if json_output:
        print_json({"ok": False, "class": None, "findings": [finding.as_dict()]})
    return typer.Exit(code=2)


def _open_log(logfile: str, follow: bool, json_output: bool):
    """(reader, name to show): standard input for -, else a regular file (that may not exist yet with --follow)."""
    from verl_deploy.boundedread import KIND
    from verl_deploy.findings import error
    from verl_deploy.names import NameProblem
    from verl_deploy.names import path as valid_path
    from verl_deploy.watch.follow import LogFollower, StreamReader

    if logfile == "-":
        return StreamReader(sys.stdin.buffer), "<stdin>"
    problem = None
    try:
        path = Path(valid_path(logfile, "log file")).expanduser()
        if not os.path.exists(path) and not follow:
            problem = f"{path} does not exist"
        elif os.path.exists(path) and not os.path.isfile(path):  # a FIFO, /dev/zero, a directory: never opened
            problem = f"{path} is {KIND.get(stat.S_IFMT(os.stat(path).st_mode), 'not a regular file')}, not a log file"
    except NameProblem as exc:
        problem = str(exc)
    if problem:
        raise _refusal(error("LOGFILE", problem, "pass the path of a verl log file, or - to read standard input"),
                       json_output)
    return LogFollower(path), str(path)


class LiveEvents:
    """--follow's output: each event as it comes (one JSON record a line with --json), once caught up."""

    def __init__(self, json_output: bool) -> None:
        self.json_output = json_output
        self.on = False  # off while catching up with what the log already held
        self.printed_step = -1
        self.scanner: LogScanner | None = None

    def __call__(self, event) -> None:
        from verl_deploy.watch.describe import as_record, describe
        from verl_deploy.watch.events import Metrics, Progress

        if not self.on:
            return
        if self.json_output:
            _emit_line(json.dumps(as_record(event), default=str))
            return
        if isinstance(event, (Metrics, Progress)):
            if isinstance(event, Progress) and event.step <= self.printed_step:
                return  # the metrics line of this step was already printed
            self.printed_step = max(self.printed_step, event.step)
        _emit_line(describe(event, self.scanner.state.total_steps if self.scanner else None))


def _follow(reader, scanner, live: LiveEvents, source: str, idle_exit: float | None, stall_minutes: float) -> None:
    """Catch up silently, say where the log stands, then print events as the log grows."""
    from verl_deploy.watch.follow import LogFollower
    from verl_deploy.watch.reader import follow as follow_reader

    if isinstance(reader, LogFollower):
        scan_to_end_of_now(reader, scanner)
    state = scanner.state
    if live.json_output:
        _emit_line(json.dumps({"event": "following", "source": source, "lines": scanner.lines,
                               "step": state.step, "total_steps": state.total_steps}))
    else:
        where = f"step {state.step}/{state.total_steps}" if state.total_steps else f"step {state.step}"
        _emit_line(f"following {source} ({scanner.lines:,} lines so far, {where}); Ctrl-C to stop")
    live.on = True
    follow_reader(reader, scanner, idle_exit=idle_exit, stall_seconds=stall_minutes * 60)


def _not_a_verl_log(path: Path | None, lines: int) -> str | None:
    """Why this input cannot be a verl log (empty, binary), or None. "No failure found" would be a lie."""
    if lines == 0:
        return "it is empty"
    if path is None:
        return None
    try:
        with path.open("rb") as handle:
            head = handle.read(65536)
    except OSError:
        return None
    if head.count(b"\0") > len(head) // 100:  # a stray NUL in a training's output is still a log
        return "it is a binary file (NUL bytes), not text"
    text = head.decode("utf-8", errors="replace")
    if text.count("\ufffd") > len(text) // 10:
        return "it is a binary file (mostly not UTF-8 text)"
    return None


def scan_to_end_of_now(reader, scanner) -> None:
    """Catch up with what is already written, without printing it as live events."""
    while True:
        block = reader.read_block()
        if not block:
            return
        scanner.feed(block)
