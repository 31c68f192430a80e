"""Events as one line of text for people and as one JSON object for programs.

Shared by `verl-deploy diagnose --follow` and the launcher's supervision, so both speak the
same way about a run.
"""

from __future__ import annotations

from verl_deploy.watch.events import (CheckpointSaved, FinalValidation, Metrics, Progress, Resumed, SwanLabLink,
                                      TotalSteps, TrackerLink)
from verl_deploy.watch.scan import FailureSeen, Stalled

SHOWN_METRICS = (
    ("critic/score/mean", "score"),
    ("response_length/mean", "response len"),
    ("actor/pg_loss", "pg_loss"),
    ("actor/grad_norm", "grad_norm"),
    ("perf/throughput", "tok/s/dev"),
    ("timing_s/step", "step s"),
    # the async modes' staleness and weight sync (verl/trainer/ppo/v1/replay_buffer.py, fully_async_policy/)
    ("training/off_policy/trajectory_staleness/mean", "staleness"),
    ("fully_async/count/stale_samples_processed", "stale samples"),
    ("fully_async/count/current_param_version", "param version"),
    ("timing_s/update_weights", "sync s"),
)


def duration(seconds: float | None) -> str:
    if seconds is None or not seconds == seconds:  # None or NaN
        return "?"
    if seconds > 999 * 86400:  # also inf: a step time from a log is any number
        return "over 999 days"
    seconds = int(round(max(0.0, seconds)))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def number(value: float) -> str:
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    if value == int(value) and abs(value) < 1e9:
        return str(int(value))
    return f"{value:.4g}"


def short_key(key: str) -> str:
    """`val-core/math_dapo/acc/mean@1` -> `math_dapo acc/mean@1` (the data source, then the measure)."""
    parts = key.split("/")
    if parts[0] in ("val-core", "val-aux") and len(parts) >= 3:
        return f"{parts[1]} {'/'.join(parts[2:])}"
    return key


def validation_text(values: dict[str, float], limit: int = 4) -> str:
    """The val-core metrics first (what verl calls the core result), as `source measure value` items."""
    keys = sorted(values, key=lambda k: (not k.startswith("val-core/"), k))
    shown = [f"{short_key(k)} {number(values[k])}" for k in keys[:limit]]
    more = len(keys) - limit
    return " · ".join(shown) + (f" (+{more} more)" if more > 0 else "") if shown else "no numeric values"


def describe(event: object, total_steps: int | None = None) -> str:
    if isinstance(event, Progress):
        rate = f" · {event.seconds_per_step:.1f} s/step" if event.seconds_per_step else ""
        return f"step {event.step}/{event.total}{rate}"
    if isinstance(event, Metrics):
        shown = [f"{label} {number(event.values[key])}" for key, label in SHOWN_METRICS if key in event.values]
        where = f"step {event.step}/{total_steps}" if total_steps else f"step {event.step}"
        return f"{where}: " + (" · ".join(shown) if shown else f"{len(event.values)} metrics")
    if isinstance(event, SwanLabLink):
        return f"SwanLab: {event.url}"
    if isinstance(event, CheckpointSaved):
        return f"checkpoint saved at step {event.step}: {event.path}"
    if isinstance(event, Resumed):
        return f"resumed from step {event.step}"
    if isinstance(event, TotalSteps):
        return f"{event.total} training steps in total"
    if isinstance(event, TrackerLink):
        return f"{event.tracker}: {event.url}"
    if isinstance(event, FinalValidation):
        return ("final validation: " if not event.continued else "final validation (more): ") + validation_text(event.values)
    if isinstance(event, FailureSeen):
        kind = "warning" if event.severity == "warning" else "failure"
        return f"{kind} {event.class_id} at line {event.line}: {event.text}"
    if isinstance(event, Stalled):
        return f"stalled: no new step for {duration(event.seconds)} (at step {event.step})"
    return str(event)


def as_record(event: object) -> dict:
    """One JSON-able object per event: {"event": kind, ...fields}."""
    kinds = {Progress: "progress", Metrics: "metrics", SwanLabLink: "swanlab", CheckpointSaved: "checkpoint",
             Resumed: "resumed", TotalSteps: "total_steps",
             FinalValidation: "final_validation", TrackerLink: "tracker_link", FailureSeen: "failure", Stalled: "stalled"}
    record: dict = {"event": kinds.get(type(event), type(event).__name__)}
    record.update({key: value for key, value in vars(event).items()})
    if isinstance(event, (Metrics, FinalValidation)):
        record["values"] = {k: (v if v == v and abs(v) != float("inf") else str(v)) for k, v in event.values.items()}
    return record
