"""Failures no single log line shows, read from the run's course: each check names its class in signatures.yaml.

A check takes the scanner's RunState and returns a one-line description of what it saw, or
None. `step_time_regression` and `reward_collapse` run after every metric line;
`resume_ran_no_steps` only at the end of a log (until then the steps may still come).
"""

from __future__ import annotations

import math
import statistics
from typing import Callable

from verl_deploy.watch.state import RunState

REGRESSION_FACTOR = 2.0
REGRESSION_WINDOW = 5
COLLAPSE_WINDOW = 5
COLLAPSE_MIN_DROP = 0.2
SCORE_KEYS = ("critic/score/mean", "critic/rewards/mean")


def step_time_regression(state: RunState) -> str | None:
    """The last step took >= 2x the median of the five before it."""
    times = [t for t in state.step_times if math.isfinite(t)]
    if len(times) < REGRESSION_WINDOW + 1:
        return None
    last, before = times[-1], times[-REGRESSION_WINDOW - 1:-1]
    median = statistics.median(before)
    if median <= 0 or last < REGRESSION_FACTOR * median:
        return None
    return f"step {state.step} took {last:.1f} s, {last / median:.1f}x the median {median:.1f} s of the 5 before"


def reward_collapse(state: RunState) -> str | None:
    """The mean of the last five scores fell from the best five-step mean by >= max(0.2, half the gain)."""
    key = next((k for k in SCORE_KEYS if len(state.history.get(k, ())) >= 2 * COLLAPSE_WINDOW), None)
    if key is None:
        return None
    values = [v for _, v in state.history[key] if math.isfinite(v)]
    if len(values) < 2 * COLLAPSE_WINDOW:
        return None
    means = [statistics.fmean(values[i:i + COLLAPSE_WINDOW]) for i in range(len(values) - COLLAPSE_WINDOW + 1)]
    best_at = max(range(len(means)), key=means.__getitem__)
    best, recent = means[best_at], means[-1]
    low = min(values[:best_at + COLLAPSE_WINDOW])
    drop = best - recent
    if drop < max(COLLAPSE_MIN_DROP, 0.5 * (best - low)):
        return None
    return f"{key}: last-5 mean {recent:.3f}, down from the best 5-step mean {best:.3f} (lowest before it {low:.3f})"


def resume_ran_no_steps(state: RunState) -> str | None:
    """Resumed from step N and no step after N was logged (checked at the end of a log)."""
    if state.resumed_from_step is None or state.step > state.resumed_from_step:
        return None
    total = f" of {state.total_steps}" if state.total_steps else ""
    return f"resumed at step {state.resumed_from_step}{total} and logged no step after it"


PER_STEP: dict[str, Callable[[RunState], str | None]] = {
    "step_time_regression": step_time_regression,
    "reward_collapse": reward_collapse,
}
AT_END: dict[str, Callable[[RunState], str | None]] = {"resume_ran_no_steps": resume_ran_no_steps}
