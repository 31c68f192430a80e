"""`verl-deploy logs`: a run's training log (an attempt's, or every attempt's failures), followed until it ends."""

from __future__ import annotations

import os
import re
import sys
import time
from typing import Callable, Optional

import typer

from verl_deploy.cli import app
from verl_deploy.cli.one_run import load
from verl_deploy.cli.output import fail
from verl_deploy.findings import error
from verl_deploy.runs.record import TERMINAL, Attempt, RunRecord, reload
from verl_deploy.runs.supervisor import ensure_supervised
from verl_deploy.views.safe_text import neutralise
from verl_deploy.watch.follow import LogFollower
from verl_deploy.watch.signatures import load_table

SEEDS = re.compile(r"Error|OOM|Exception")  # what seed 001 greps for


@app.command("logs")
def logs_command(run_id: Optional[str] = typer.Argument(None, metavar="[RUN]", help="Run id or prefix (default: newest)."),
                 follow: bool = typer.Option(False, "--follow", "-f", help="Keep printing until the run ends."),
                 errors: bool = typer.Option(False, "--errors", help="Only lines with Error, OOM or Exception (and known failures)."),
                 attempt_n: Optional[int] = typer.Option(None, "--attempt", help="An earlier attempt's log."),
                 raw: bool = typer.Option(False, "--raw", help="The bytes as the training wrote them, terminal escapes "
                                                             "included (by default control characters are shown inert: ␛, ␍).")) -> None:
    """The training log of a run (the current attempt unless --attempt)."""
    if attempt_n is not None and attempt_n < 1:
        raise fail([error("--attempt", f"{attempt_n} is not an attempt number (they count from 1)",
                          "pass --attempt 1 for the first attempt; `verl-deploy status RUN` lists them")])
    record = ensure_supervised(load(run_id))
    attempt = _attempt(record, attempt_n)
    out = _Printer(_filter(errors), (lambda line: line) if raw else neutralise)
    if errors and attempt_n is None and len(record.attempts) > 1:  # --errors: every attempt's failures, oldest first
        for earlier in record.attempts[:-1]:
            _heading(earlier)
            out.whole(LogFollower(earlier.log))
        _heading(attempt)
    try:
        _follow(record, attempt, out, follow=follow, pinned=attempt_n is not None)
    except KeyboardInterrupt:
        return


def _attempt(record: RunRecord, attempt_n: Optional[int]) -> Attempt:
    """The attempt asked for (else the current one); one line when there is none such."""
    attempts = {a.n: a for a in record.attempts}
    attempt = attempts.get(attempt_n) if attempt_n is not None else record.current
    if attempt is None:
        have = f"attempts {min(attempts)}-{max(attempts)}" if attempts else "no attempt yet"
        raise fail([error("--attempt" if attempt_n is not None else "run",
                          f"run {record.id} has {have}" + (f", not {attempt_n}" if attempt_n is not None else ""),
                          f"pass --attempt {max(attempts)} or less" if attempts else "wait until the run has started")])
    return attempt


def _filter(errors: bool) -> Callable[[str], bool]:
    """Which lines are shown: all, or (--errors) those with Error, OOM or Exception and known failures."""
    table = load_table()
    return lambda line: not errors or bool(SEEDS.search(line)) or bool(table.failures_in(line))


class _Printer:
    """Writes the wanted lines, shown as asked (inert control characters, or raw)."""

    def __init__(self, wanted: Callable[[str], bool], shown: Callable[[str], str]):
        self.wanted, self.shown = wanted, shown

    def line(self, line: str) -> None:
        if self.wanted(line):
            sys.stdout.write(self.shown(line) + "\n")

    def lines(self, follower: LogFollower) -> None:
        for line in follower.read_lines():
            self.line(line)

    def last(self, follower: LogFollower) -> None:
        """A last line without its newline."""
        last = follower.take_partial().decode("utf-8", errors="replace")
        if last:
            self.line(last)

    def whole(self, follower: LogFollower) -> None:
        """Everything the log holds now, to its end."""
        lines = list(follower.read_lines())
        while lines:
            for line in lines:
                self.line(line)
            lines = list(follower.read_lines())
        self.last(follower)


def _heading(attempt: Attempt) -> None:
    sys.stdout.write(f"--- attempt {attempt.n}: {neutralise(attempt.reason)} ---\n")


def _follow(record: RunRecord, attempt: Attempt, out: _Printer, *, follow: bool, pinned: bool) -> None:
    """The attempt's log; with `follow`, on until the run ends (into a retry's log, unless the attempt is pinned)."""
    follower = LogFollower(attempt.log)
    while True:
        out.lines(follower)
        if follower.problem:  # a directory or FIFO where the log should be: say so once, never block on it
            raise fail([error("log", f"attempt {attempt.n}'s log {follower.problem}",
                              f"put the log file back at that path, or look in {record.directory}/attempt-{attempt.n}/ "
                              f"(`verl-deploy status {record.id}` shows the run)")])
        sys.stdout.flush()
        if not follow:
            return
        record = reload(record)
        if record.current and record.current.n != attempt.n and not pinned:
            attempt = record.current  # a retry started: go on with its log
            follower = LogFollower(attempt.log)
            _heading(attempt)
            continue
        if record.state in TERMINAL and os.path.getsize(attempt.log) <= follower.offset + len(follower.partial):
            out.last(follower)
            return
        time.sleep(0.2)
