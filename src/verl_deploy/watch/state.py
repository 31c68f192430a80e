"""What the watcher knows about a run so far: step N of M, last metrics, the link, checkpoints."""

from __future__ import annotations

import math
import statistics
from collections import deque
from dataclasses import dataclass, field

from verl_deploy.watch.events import (CheckpointSaved, Event, FinalValidation, Metrics, Progress, Resumed, SwanLabLink,
                                      TotalSteps)

MAIN_METRICS = ("critic/score/mean", "critic/rewards/mean", "response_length/mean", "perf/throughput", "timing_s/step")
HISTORY = 50
VALIDATION_PREFIXES = ("val-core/", "val-aux/")
MAX_VALIDATION_KEYS = 100
MAX_METRIC_KEYS = 1000  # a log that names more keys keeps the first ones (the record stays small)


@dataclass
class RunState:
    step: int = 0
    total_steps: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    history: dict[str, deque] = field(default_factory=dict)
    step_times: deque = field(default_factory=lambda: deque(maxlen=HISTORY))
    swanlab_url: str | None = None
    last_checkpoint_step: int | None = None
    resumed_from_step: int | None = None
    # the newest validation verl logged: {"step", "final" (verl's `Final validation metrics`), "metrics"}
    validation: dict = field(default_factory=dict)

    def apply(self, event: Event) -> None:
        """What one event changes (events of other kinds change nothing here)."""
        if isinstance(event, Progress):
            self.step = max(self.step, event.step)
            self.total_steps = event.total
        elif isinstance(event, Metrics):
            self._metrics(event)
        elif isinstance(event, SwanLabLink):
            if self.swanlab_url is None or not event.local:
                self.swanlab_url = event.url
        elif isinstance(event, CheckpointSaved):
            self.last_checkpoint_step = event.step
        elif isinstance(event, TotalSteps):
            self.total_steps = self.total_steps or event.total
        elif isinstance(event, FinalValidation):
            self._final_validation(event)
        elif isinstance(event, Resumed):
            self.resumed_from_step = event.step
            self.step = max(self.step, event.step)

    def _metrics(self, event: Metrics) -> None:
        """A step's metrics: the last values (bounded), the main ones' history, validation, the step time."""
        self.step = max(self.step, event.step)
        for key, value in event.values.items():
            if key in self.metrics or len(self.metrics) < MAX_METRIC_KEYS:
                self.metrics[key] = value
        for key, value in event.values.items():
            if key in MAIN_METRICS or key.startswith("val-core/"):
                self.history.setdefault(key, deque(maxlen=HISTORY)).append((event.step, value))
        checked = {k: v for k, v in event.values.items() if k.startswith(VALIDATION_PREFIXES)}
        if checked:
            self.validation = {"step": event.step, "final": False, "metrics": _bounded(checked)}
        step_time = event.values.get("timing_s/step")
        if step_time is not None and math.isfinite(step_time) and step_time >= 0:  # an ETA from inf is no ETA
            self.step_times.append(step_time)

    def _final_validation(self, event: FinalValidation) -> None:
        if event.continued and not self.validation.get("final"):
            return  # the wrapped dict of `Initial validation metrics` (its step:0 line has the values)
        metrics = dict(self.validation.get("metrics", {})) if event.continued else {}
        metrics.update(event.values)
        self.validation = {"step": self.step, "final": True, "metrics": _bounded(metrics)}

    @property
    def validation_metrics(self) -> dict[str, float]:
        return dict(self.validation.get("metrics", {}))

    @property
    def median_step_seconds(self) -> float | None:
        return statistics.median(self.step_times) if self.step_times else None

    @property
    def eta_seconds(self) -> float | None:
        median = self.median_step_seconds
        if median is None or self.total_steps is None:
            return None
        return max(0, self.total_steps - self.step) * median


def _bounded(values: dict[str, float]) -> dict[str, float]:
    """At most MAX_VALIDATION_KEYS finite values (a record holds them; NaN is not JSON)."""
    kept = {k: v for k, v in values.items() if math.isfinite(v)}
    return dict(list(kept.items())[:MAX_VALIDATION_KEYS])
