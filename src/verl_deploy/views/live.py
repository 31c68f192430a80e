"""`status --watch` and `launch --follow`: the run as it goes, full screen on a terminal, one line per event off it.

Everything comes from the run record (state, attempts, ETA, notices; the supervisor writes it)
and from following the attempt logs here (metric history for the trend charts). Quitting
(`q`, Ctrl-C) leaves the run as it is: this module never writes the record or signals a process.
"""

from __future__ import annotations

import os
import select
import sys
import time
from typing import Any, Callable, overload

from rich.console import Console, Group
from rich.markup import escape
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from verl_deploy.runs.record import TERMINAL, RecordError, RunRecord
from verl_deploy.views.devices import DevicePoller, DeviceReading, memory_estimate_mb
from verl_deploy.views.history import RunHistory
from verl_deploy.views.safe_text import neutralise
from verl_deploy.watch.describe import duration, number

REFRESH = 0.5
BLOCKS = "▁▂▃▄▅▆▇█"
TREND_POINTS = 40
# (label, how to find the key among the logged ones, draw a trend)
METRICS: tuple[tuple[str, Callable[[str], bool], bool], ...] = (
    ("score", lambda k: k == "critic/score/mean", True),
    ("reward", lambda k: k == "critic/rewards/mean", False),
    ("accuracy", lambda k: k.startswith("val-core/") and "/acc/" in k, True),
    ("response len", lambda k: k == "response_length/mean", True),
    ("clip ratio", lambda k: k == "response_length/clip_ratio", False),
    ("entropy", lambda k: k == "actor/entropy", True),
    ("pg_clipfrac", lambda k: k == "actor/pg_clipfrac", False),
    ("grad norm", lambda k: k == "actor/grad_norm", True),
    ("throughput", lambda k: k == "perf/throughput", True),
    ("step s", lambda k: k == "timing_s/step", True),
)


def sparkline(values: list[float]) -> str:
    if not values:
        return ""
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    return "".join(BLOCKS[min(len(BLOCKS) - 1, int((v - low) / span * (len(BLOCKS) - 1) + 0.5))] for v in values)


@overload
def load_record(run_id: str, previous: RunRecord) -> RunRecord: ...
@overload
def load_record(run_id: str, previous: None) -> RunRecord | None: ...


def load_record(run_id: str, previous: RunRecord | None) -> RunRecord | None:
    """The record as the supervisor last wrote it; a damaged or half-visible file keeps the previous one."""
    try:
        return RunRecord.load(run_id)
    except (RecordError, OSError, ValueError, TypeError, KeyError):
        return previous


def eta_text(record: RunRecord) -> str:
    """ETA only while the run runs: a stopped or finished run has none."""
    if record.state in TERMINAL or record.eta_seconds is None:
        return ""
    return f"ETA {duration(record.eta_seconds)}"


def progress_line(record: RunRecord, history: RunHistory) -> str:
    """step N/M · ETA · reward · attempt: the one line `launch --follow` keeps current."""
    step = max(record.step, history.step)
    total = record.total_steps or history.total_steps
    parts = [f"step {step}/{total}" if total else f"step {step}"]
    if eta_text(record):
        parts.append(eta_text(record))
    score = history.series.last("critic/score/mean")
    if score is None:
        score = record.metrics.get("critic/score/mean")
    if score is not None:
        parts.append(f"score {number(score)}")
    if record.current:
        parts.append(f"attempt {record.current.n}")
    return " · ".join(parts)


class Follow:
    """Keeps a RunHistory in step with the record: earlier attempts read once, the current one followed."""

    def __init__(self, record: RunRecord):
        self.history = RunHistory()
        self.record = record
        # what happened before this view started, in order, for the first refresh: each ended attempt's events,
        # then the line that starts the next one (as refresh prints it when it sees an attempt begin)
        self.backlog: list[str] = []
        for attempt, following in zip(record.attempts, record.attempts[1:]):
            self.history.start_attempt(attempt.n, attempt.log, attempt.reason, attempt.resumed_from_step)
            self.history.finish_attempt()
            self.backlog += self.history.take_new_events() + [f"attempt {following.n}: {following.reason}"]
        self._start_current(record)
        self.history.update()
        self.seen_notices = len(record.notices)
        self.seen_state = record.state
        self.finished = False

    def take_backlog(self) -> list[str]:
        """Everything already in the logs when the view started, in order, with the lines that start each retry."""
        lines, self.backlog = self.backlog + self.history.take_new_events(), []
        return lines

    def _start_current(self, record: RunRecord) -> None:
        current = record.current
        if current:
            self.history.start_attempt(current.n, current.log, current.reason, current.resumed_from_step)

    def refresh(self) -> list[str]:
        """Reload the record, read new log lines; returns the lines to print for what happened since."""
        record = load_record(self.record.id, self.record)
        lines = self.take_backlog()
        if record.current and record.current.n != self.history.attempt_n:
            self.history.update()
            self.history.finish_attempt()
            lines += self.history.take_new_events()
            self._start_current(record)
            lines.append(f"attempt {record.current.n}: {record.current.reason}")
        self.history.update()
        lines += self.history.take_new_events()
        if record.state in TERMINAL and not self.finished:  # the end-of-log checks (a resume that ran no step)
            self.finished = True
            self.history.finish_attempt()
            lines += self.history.take_new_events()
        for entry in record.notices[self.seen_notices:]:
            lines.append(f"notice: {entry.get('title')}")
        self.seen_notices = len(record.notices)
        if record.state != self.seen_state and record.state in TERMINAL:
            lines.append(f"run {record.id}: {record.state} at step {max(record.step, self.history.step)}"
                         f"/{record.total_steps or self.history.total_steps or '?'}")
        self.seen_state = record.state
        self.record = record
        return lines


# -- the screen ---------------------------------------------------------------------------------

def _metrics_table(history: RunHistory, record: RunRecord) -> Table:
    table = Table(box=None, show_header=False, pad_edge=False, expand=False)
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_column(style="cyan")
    keys = list(history.series.points) or list(record.metrics)
    for label, wanted, trend in METRICS:
        key = next((k for k in keys if wanted(k)), None)
        if key is None:
            continue
        value = history.series.last(key)
        value = record.metrics.get(key) if value is None else value
        if value is None:
            continue
        table.add_row(label, number(value) if isinstance(value, (int, float)) else "?", sparkline(history.series.values(key, TREND_POINTS)) if trend else "")
    return table


def _validation_line(history: RunHistory, record: RunRecord) -> str:
    """verl's newest validation (the final one once training ended), with the curve of its first core metric."""
    from verl_deploy.watch.describe import validation_text

    if history.final_validation:
        values, when = history.final_validation, "final"
    else:
        keys = [k for k in history.series.points if k.startswith(("val-core/", "val-aux/"))]
        steps = [history.series.points[k][-1][0] for k in keys]
        newest = max(steps, default=None)
        values = {k: history.series.points[k][-1][1] for k, s in zip(keys, steps) if s == newest}
        when = f"step {newest}"
        if not values and record.validation.get("metrics"):
            values = record.validation["metrics"]
            when = "final" if record.validation.get("final") else f"step {record.validation.get('step')}"
    if not values:
        return ""
    core = next((k for k in sorted(values) if k.startswith("val-core/")), None)
    trend = sparkline(history.series.values(core, TREND_POINTS)) if core else ""
    return f"validation ({when}): {validation_text(values)}" + (f"  {trend}" if len(trend) > 1 else "")


def _timing_line(history: RunHistory) -> str:
    phases = [(k.split("/", 1)[1], history.series.last(k)) for k in history.series.points
              if k.startswith("timing_s/") and k != "timing_s/step"]
    return " · ".join(f"{name} {value:.1f}s" for name, value in phases if value is not None)


def _devices_table(reading: DeviceReading | None, estimate_mb: float | None) -> Table | Text:
    if reading is None:
        return Text("devices: reading…", style="dim")
    if not reading.rows:
        return Text(f"devices: {reading.problem}", style="dim")
    table = Table(box=None, header_style="bold", pad_edge=False)
    for column in ("dev", "name", "memory (MB)", "", "util"):
        table.add_column(column)
    for row in reading.rows:
        used, total = row.used_mb, row.total_mb
        bar = ""
        if used is not None and total:
            filled = int(20 * used / total)
            bar = "█" * filled + "·" * (20 - filled)
            if estimate_mb:
                at = min(19, int(20 * estimate_mb / total))
                bar = bar[:at] + "|" + bar[at + 1:]
        memory = f"{used}/{total}" if used is not None else "?"
        style = "red" if used and total and used > 0.95 * total else ""
        table.add_row(str(row.id), row.name, memory, Text(bar, style=style),
                      "" if row.utilization is None else f"{row.utilization}%")
    return table


def render(follow: Follow, reading: DeviceReading | None, width: int = 120, *, live: bool = True):
    record, history = follow.record, follow.history
    spec = record.spec
    state_style = {"running": "green", "succeeded": "bold green", "failed": "bold red", "stopped": "yellow"}
    header = Text.assemble(("verl-deploy ", "bold"), (f"run {record.id}  ", ""),
                           (record.state, state_style.get(record.state, "")),
                           (f"  {record.backend} · {spec.get('mode')} · {spec.get('framework')} · "
                            f"{len(spec.get('devices') or [])} {str(spec.get('device', '')).upper()}", "dim"))
    parts: list = [header]
    attempt = record.current
    if attempt:
        parts.append(Text(neutralise(f"attempt {attempt.n}: {attempt.reason}" +
                                     (f" (+{','.join(attempt.features)})" if attempt.features else ""))))
    step = max(record.step, history.step)
    total = record.total_steps or history.total_steps
    line = Text(progress_line(record, history), style="bold")
    median = history.median_step_seconds
    if median:
        line.append(f" · median step {median:.1f} s", style="")
    parts.append(line)
    if total:
        filled = int(min(1.0, step / total) * (width - 10))
        parts.append(Text("━" * filled, style="green") + Text("━" * (width - 10 - filled), style="grey30"))
    body = Table.grid(padding=(0, 4))
    body.add_column()
    body.add_column()
    estimate = memory_estimate_mb(record)
    devices_title = "devices" + (f" (| = estimate {estimate / 1024:.1f} GB)" if estimate else "")
    body.add_row(Panel(_metrics_table(history, record), title="metrics", title_align="left"),
                 Panel(_devices_table(reading, estimate), title=devices_title, title_align="left"))
    parts.append(body)
    timing = _timing_line(history)
    if timing:
        parts.append(Text("timing: " + timing, style="dim"))
    checked = _validation_line(history, record)
    if checked:
        parts.append(Text(neutralise(checked)))
    link = record.swanlab_url or history.swanlab_url
    if link:
        parts.append(Text(neutralise(f"SwanLab: {link}")))
    if record.failure:
        parts.append(Text(neutralise(f"failure: {record.failure.get('class')} — {record.failure.get('cause') or ''}"),
                          style="red"))
    for entry in record.notices[-3:]:
        parts.append(Text(neutralise(f"notice: {entry.get('title')}"), style="yellow"))
    events = list(history.events)[-6:]
    if events:
        parts.append(Panel("\n".join(escape(neutralise(e)) for e in events), title="events", title_align="left"))
    if live:
        parts.append(Text("q or Ctrl-C quits this view; the run goes on", style="dim"))
    return Group(*parts)


class _Keys:
    """Single keys from a terminal's stdin without Enter (cbreak), restored on exit."""

    def __init__(self) -> None:
        self.fd = sys.stdin.fileno() if sys.stdin and sys.stdin.isatty() else None
        self.saved: Any = None  # termios attributes while in cbreak

    def __enter__(self) -> "_Keys":
        if self.fd is not None:
            import termios
            import tty

            self.saved = termios.tcgetattr(self.fd)
            tty.setcbreak(self.fd)
        return self

    def __exit__(self, *exc) -> None:
        if self.saved is not None and self.fd is not None:
            import termios

            termios.tcsetattr(self.fd, termios.TCSADRAIN, self.saved)

    def wait(self, seconds: float) -> str:
        if self.fd is None:
            time.sleep(seconds)
            return ""
        ready, _, _ = select.select([self.fd], [], [], seconds)
        return os.read(self.fd, 32).decode(errors="replace") if ready else ""


def watch_screen(record: RunRecord, console: Console, *, keep_supervised: Callable[[RunRecord], RunRecord]) -> RunRecord:
    """Full screen until the run ends or the user quits; then the last frame stays on the normal screen."""
    from rich.live import Live

    follow = Follow(record)
    poller = DevicePoller(record).start()
    last_check = time.monotonic()
    try:
        with _Keys() as keys, Live(render(follow, None, console.width), console=console, screen=True,
                                   auto_refresh=False, redirect_stderr=False) as live:
            while True:
                follow.refresh()
                live.update(render(follow, poller.latest, console.width), refresh=True)
                if follow.record.state in TERMINAL:
                    break
                if time.monotonic() - last_check > 5:
                    follow.record = keep_supervised(follow.record)
                    last_check = time.monotonic()
                if "q" in keys.wait(REFRESH).lower():
                    break
    except KeyboardInterrupt:
        pass
    finally:
        poller.stop()
    console.print(render(follow, poller.latest, console.width, live=False))
    return follow.record


def watch_lines(record: RunRecord, write: Callable[[str], None], *,
                keep_supervised: Callable[[RunRecord], RunRecord], backlog: int = 10) -> RunRecord:
    """Off a terminal: one line per event (the last `backlog` already in the log first) until the run ends."""
    follow = Follow(record)
    for line in follow.take_backlog()[-backlog:]:
        write(line)
    if record.state in TERMINAL:
        follow.finished = True
        follow.history.finish_attempt()
        for line in follow.history.take_new_events():
            write(line)
        write(f"run {record.id}: {record.state} at step {max(record.step, follow.history.step)}"
              f"/{record.total_steps or follow.history.total_steps or '?'}")
        return record
    last_check = time.monotonic()
    try:
        while True:
            for line in follow.refresh():
                write(line)
            if follow.record.state in TERMINAL:
                return follow.record
            if time.monotonic() - last_check > 5:
                follow.record = keep_supervised(follow.record)
                last_check = time.monotonic()
            time.sleep(REFRESH)
    except KeyboardInterrupt:
        return follow.record
