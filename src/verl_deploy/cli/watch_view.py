"""Showing a run while it goes, for `status --watch` and `launch --follow`.

On a terminal: the full-screen live view (views/live.py); off a terminal: one line per event;
quiet (`--json`): nothing until the end. All three wait until the run ends (or the user quits
the screen) and return the run's last record. None of them changes the run.
"""

from __future__ import annotations

import sys


def _write(line: str) -> None:
    from verl_deploy.views.safe_text import neutralise

    sys.stdout.write(neutralise(line) + "\n")
    sys.stdout.flush()


def follow_run(run_id: str, *, quiet: bool = False, screen: bool | None = None):
    from verl_deploy.cli.output import console
    from verl_deploy.runs.supervisor import ensure_supervised
    from verl_deploy.runs.record import RunRecord
    from verl_deploy.views.live import watch_lines, watch_screen

    record = ensure_supervised(RunRecord.load(run_id))
    if quiet:
        return watch_lines(record, lambda line: None, keep_supervised=ensure_supervised)
    if screen if screen is not None else sys.stdout.isatty():
        return watch_screen(record, console(), keep_supervised=ensure_supervised)
    return watch_lines(record, _write, keep_supervised=ensure_supervised)
