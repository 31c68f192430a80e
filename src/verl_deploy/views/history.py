"""A run's course read from its attempt logs: metric series per step, marks, and recent events.

The live view keeps one `RunHistory` and calls `update()` on each refresh: it follows the
current attempt's log (and starts on the next attempt's log when recovery makes one); the
report reads every attempt's log once. Both see the same series and marks. Memory stays
bounded: at most MAX_POINTS points per metric (older points thinned out) and MAX_EVENTS lines.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass, field

from verl_deploy.watch.describe import describe
from verl_deploy.watch.events import (CheckpointSaved, FinalValidation, Metrics, Progress, Resumed, SwanLabLink,
                                      TotalSteps, TrackerLink)
from verl_deploy.watch.follow import LogFollower
from verl_deploy.watch.scan import FailureSeen, LogScanner

MAX_POINTS = 4000
MAX_EVENTS = 200
MAX_KEYS = 400  # a log with thousands of metric keys (per data source) keeps the first ones


@dataclass
class Mark:
    """Something to draw on the step axis: an attempt start, a resume, a failure, a checkpoint."""

    step: int
    kind: str  # attempt | resume | failure | warning | survived | checkpoint
    label: str
    attempt: int | None = None  # failure, warning, survived: the attempt and log line that printed it
    line: int | None = None


@dataclass
class Series:
    points: dict[str, list[tuple[int, float]]] = field(default_factory=dict)

    def add(self, step: int, values: dict[str, float]) -> None:
        for key, value in values.items():
            if key not in self.points and len(self.points) >= MAX_KEYS:
                continue
            line = self.points.setdefault(key, [])
            if line and line[-1][0] == step:  # the same step logged again (a retry redoes it): keep the last
                line[-1] = (step, value)
            else:
                line.append((step, value))
            if len(line) > MAX_POINTS:
                del line[1:len(line) // 2:2]  # thin the older half, keep the first and the recent points

    def last(self, key: str) -> float | None:
        line = self.points.get(key)
        return line[-1][1] if line else None

    def values(self, key: str, count: int) -> list[float]:
        return [v for _, v in self.points.get(key, [])[-count:] if math.isfinite(v)]


class RunHistory:
    """Feeds attempt logs through the watcher and keeps what the views draw."""

    def __init__(self) -> None:
        self.series = Series()
        self.marks: list[Mark] = []
        self.events: deque[str] = deque(maxlen=MAX_EVENTS)
        self.new_events: list[str] = []  # since the last take_new_events()
        self.step = 0
        self.total_steps: int | None = None
        self.swanlab_url: str | None = None
        self.final_validation: dict[str, float] = {}
        self.tracker_links: dict[str, str] = {}  # tracker -> where it shows the run (the first one each printed)  # verl's `Final validation metrics` (the end of training)
        self.attempt_n: int | None = None
        self._follower: LogFollower | None = None
        self._scanner: LogScanner | None = None
        self.log_problems: list[str] = []  # "attempt N: <log> is a directory, ..." for a log that cannot be read

    def start_attempt(self, n: int, log: str, reason: str, resumed_from: int | None, offset: int = 0) -> None:
        self.attempt_n = n
        self._follower = LogFollower(log, offset=offset) if log else None
        self._scanner = LogScanner(eager=True, on_event=self._event)
        if n > 1 or resumed_from:
            self.marks.append(Mark(resumed_from or self.step, "attempt", f"attempt {n}: {reason}"))

    def update(self) -> None:
        """Read what the current attempt's log gained since the last call."""
        if self._follower is None or self._scanner is None:
            return
        block = self._follower.read_block()
        while block:
            self._scanner.feed(block)
            block = self._follower.read_block()
        self._scanner.peek_partial(self._follower.partial)
        self._settle_survived()

    def _settle_survived(self) -> None:
        """A failure line printed before the scripts' last hand-over to the training was survived (they exit on one
        they cannot retry): its mark stops being a failure once the hand-over line is read. A warning stays one."""
        handover = self._scanner.handover_line if self._scanner else None
        if handover is None:
            return
        for mark in self.marks:
            if mark.kind == "failure" and mark.attempt == self.attempt_n and (mark.line or 0) < handover:
                mark.kind, mark.label = "survived", f"{mark.label.split(' (')[0]} (survived: before the hand-over)"

    def finish_attempt(self):
        """The attempt ended: its last partial line, the end-of-log checks; returns its diagnosis."""
        from verl_deploy.watch.diagnosis import diagnose

        if self._follower is None or self._scanner is None:
            return None
        self.update()
        self._scanner.feed(self._follower.take_partial())
        self._settle_survived()
        if self._follower.problem:
            self.log_problems.append(f"attempt {self.attempt_n}'s log {self._follower.problem}")
        return diagnose(self._scanner)  # finishes the scan (a resume that ran no step shows only here)

    def take_new_events(self) -> list[str]:
        new, self.new_events = self.new_events, []
        return new

    @property
    def median_step_seconds(self) -> float | None:
        return self._scanner.state.median_step_seconds if self._scanner else None

    def _say(self, text: str) -> None:
        self.events.append(text)
        self.new_events.append(text)

    def _event(self, event: object) -> None:
        if isinstance(event, Metrics):
            self.series.add(event.step, event.values)
            self.step = max(self.step, event.step)
        elif isinstance(event, Progress):
            self.step, self.total_steps = max(self.step, event.step), event.total
            return  # a bar refresh per step: the metric line already said it
        elif isinstance(event, TotalSteps):
            self.total_steps = self.total_steps or event.total
        elif isinstance(event, SwanLabLink):
            self.swanlab_url = self.swanlab_url if (self.swanlab_url and event.local) else event.url
        elif isinstance(event, TrackerLink):
            self.tracker_links.setdefault(event.tracker, event.url)
        elif isinstance(event, FinalValidation):
            if event.continued and not self.final_validation:
                return  # the wrapped dict of `Initial validation metrics` (its step:0 line has the values)
            if not event.continued:
                self.final_validation = {}
            self.final_validation.update(event.values)
            self.series.add(self.step, event.values)  # verl logs them at the last step too: the same point
        elif isinstance(event, Resumed):
            self.marks.append(Mark(event.step, "resume", f"resumed from step {event.step}"))
        elif isinstance(event, CheckpointSaved):
            self.marks.append(Mark(event.step, "checkpoint", f"checkpoint at step {event.step}"))
        elif isinstance(event, FailureSeen):
            kind = "failure" if event.severity == "fatal" else "warning"  # the plots draw failures only
            self.marks.append(Mark(self.step, kind, f"{event.class_id} ({event.severity})", self.attempt_n, event.line))
        self._say(describe(event, self.total_steps))


def read_logs(logs: list[tuple[int, str, str, int | None]]) -> tuple[RunHistory, list]:
    """Every attempt's log at once: [(n, log path, reason, resumed_from_step)] -> history and each attempt's diagnosis."""
    history = RunHistory()
    diagnoses = []
    for n, log, reason, resumed_from in logs:
        history.start_attempt(n, log, reason, resumed_from)
        diagnoses.append(history.finish_attempt())
    return history, diagnoses
