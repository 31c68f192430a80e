"""Turning verl log lines into events: progress, metrics, the SwanLab link, checkpoints.

Formats (shared/reference/verl-keys.md §5): tqdm's `Training Progress: 12%|...| 12/100
[mm:ss<hh:mm:ss, 51.96s/it]` (refreshes separated by `\\r`, forwarded by Ray with a
`(TaskRunner pid=N)` prefix); the console logger's `step:N - key:value - ...` where values
may be numpy reprs (`np.float64(0.25)`) on verl 0.9; SwanLab's `View run at URL` (cloud) or
`swanlab watch DIR` (local); checkpoint saves and resumes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable, Union

from verl_deploy.textnumbers import float_or_none, int_of

RAY_PREFIX = re.compile(r"^\((?:[\w.]+) pid=\d+(?:, ip=[\d.:a-fA-F]+)?\)\s?")
ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# bounded repeats: a 4 MiB line of bar fragments costs one pass, not one pass per fragment
PROGRESS = re.compile(r"Training Progress:\s{0,20}\d{1,20}%\|[^|\n]{0,1000}\|\s{0,20}(\d+)/(\d+)(?:\s{0,20}\[([^\]]{0,200})\])?")
RATE = re.compile(r"([\d.]{1,30})(s/it|it/s)")
METRIC_LINE = re.compile(r"(?:^|\s)step:(\d+) - (.*)$")
NUMBER = re.compile(r"^(?:np\.\w+\(|numpy\.\w+\()?\s*([-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf|-inf))\s*\)?$")
SWANLAB_URL = re.compile(r"View run at\s+(https?://\S+)")
SWANLAB_LOCAL = re.compile(r"swanlab watch\s+(\S+?)`?(?:\s|$)")
CKPT_SAVE = re.compile(r"local_global_step_folder:\s*(\S*global_step_(\d+))")
RESUME = re.compile(r"Setting global step to (\d+)")
TOTAL_STEPS = re.compile(r"Total training steps: (\d+)")
# other trackers' run links (profiles/trackers.py): wandb, mlflow (a tracking server), ClearML; TensorBoard's folder
WANDB_URL = re.compile(r"wandb:\s.{0,12}View run (?:.{1,200}? )?at:? (https?://\S+)")
MLFLOW_URL = re.compile(r"View run .{1,200}? at: (https?://\S+/#/experiments/\S+)")
CLEARML_URL = re.compile(r"ClearML results page: (https?://\S+)")
TENSORBOARD_DIR = re.compile(r"Saving tensorboard log to (\S+?)\.?\s*$")
# verl's last step: `pprint(f"Final validation metrics: {last_val_metrics}")`, a dict repr (numpy reprs on 0.9)
# A dict over 80 characters is wrapped by pprint: `("Final validation metrics: {'a': 1, "` then lines ` "'b': 2}")`.
FINAL_VALIDATION = re.compile(r"Final validation metrics:\s*(\{.{0,20000})")
FINAL_VALIDATION_MORE = re.compile(r"^\s{0,4}\"('val-.{0,20000})")
DICT_ITEM = re.compile(r"['\"]([^'\"]{1,200})['\"]:\s*((?:np\.|numpy\.)?\w*\(?[-+\w.]{1,60}\)?)")

# What a line must contain to carry one of these events: a fast scan looks only at such lines.
EVENT_MARKERS = (
    r"Training Progress:", r"step:\d+ - ", r"View run at", r"swanlab watch",
    r"local_global_step_folder:", r"Setting global step to", r"Total training steps:",
    r"Final validation metrics:", r"\"'val-", r"View run ", r"ClearML results page:", r"Saving tensorboard log to",
)


@dataclass(frozen=True)
class Progress:
    step: int
    total: int
    seconds_per_step: float | None = None


@dataclass(frozen=True)
class Metrics:
    step: int
    values: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class SwanLabLink:
    url: str
    local: bool = False


@dataclass(frozen=True)
class CheckpointSaved:
    step: int
    path: str


@dataclass(frozen=True)
class Resumed:
    step: int


@dataclass(frozen=True)
class TotalSteps:
    """verl prints `Total training steps: N` once, before the first step."""

    total: int


@dataclass(frozen=True)
class FinalValidation:
    """verl's `Final validation metrics: {...}` at the end of training (the numeric values of the dict)."""

    values: dict[str, float] = field(default_factory=dict)
    continued: bool = False  # a later line of the wrapped dict: adds to the first line's values


@dataclass(frozen=True)
class TrackerLink:
    """Where a tracker other than SwanLab shows the run (a URL, or TensorBoard's log folder)."""

    tracker: str
    url: str


Event = Union[TrackerLink, Progress, Metrics, SwanLabLink, CheckpointSaved, Resumed, TotalSteps, FinalValidation]


MAX_SEGMENTS = 200  # of a line with more \r-refreshes, the first and last 100 are read (a 4 MiB line of "\r" stays cheap)


def clean(line: str) -> list[str]:
    """A raw log line -> its text segments without ANSI codes and the Ray actor prefix."""
    text = ANSI.sub("", line)
    parts = text.split("\r")
    if len(parts) > MAX_SEGMENTS:
        parts = parts[:MAX_SEGMENTS // 2] + parts[-MAX_SEGMENTS // 2:]
    return [RAY_PREFIX.sub("", part) for part in parts if part.strip()]


def parse_number(text: str) -> float | None:
    """A metric value (`0.25`, `np.float64(0.25)`), or None for anything else (also an over-long number)."""
    text = text.strip()
    if len(text) > 96:
        return None
    match = NUMBER.match(text)
    return float_or_none(match.group(1)) if match else None


MAX_KEYS_PER_LINE = 2000
MAX_KEY_CHARS = 200


def parse_metrics(step: int, body: str) -> Metrics:
    values: dict[str, float] = {}
    for item in body.split(" - ", MAX_KEYS_PER_LINE):
        key, sep, raw = item.partition(":")
        key = key.strip()
        if not sep or len(key) > MAX_KEY_CHARS:
            continue
        number = parse_number(raw)
        if number is not None:
            values[key] = number
    return Metrics(step, values)


def parse_final_validation(body: str, continued: bool = False) -> FinalValidation:
    values: dict[str, float] = {}
    for match in DICT_ITEM.finditer(body):
        number = parse_number(match.group(2))
        if number is not None and len(values) < MAX_KEYS_PER_LINE:
            values[match.group(1)] = number
    return FinalValidation(values, continued)


# One event per line kind, tried in this order; the first pattern that matches wins.
MAX_URL = 2048  # characters kept of a link or a checkpoint path
# A number no real run writes (a 5,000-digit step) raises NotANumber: the scanner skips and counts the line.
LINE_EVENTS = (
    (METRIC_LINE, lambda m: parse_metrics(int_of(m.group(1)), m.group(2))),
    (WANDB_URL, lambda m: TrackerLink("wandb", m.group(1)[:MAX_URL].rstrip(".,;)"))),  # before SwanLab's: same words
    (MLFLOW_URL, lambda m: TrackerLink("mlflow", m.group(1)[:MAX_URL].rstrip(".,;)"))),
    (CLEARML_URL, lambda m: TrackerLink("clearml", m.group(1)[:MAX_URL].rstrip(".,;)"))),
    (TENSORBOARD_DIR, lambda m: TrackerLink("tensorboard", m.group(1)[:MAX_URL])),
    (SWANLAB_URL, lambda m: SwanLabLink(m.group(1)[:MAX_URL].rstrip(".,;)"))),
    (SWANLAB_LOCAL, lambda m: SwanLabLink(f"swanlab watch {m.group(1)[:MAX_URL]}", local=True)),
    (CKPT_SAVE, lambda m: CheckpointSaved(int_of(m.group(2)), m.group(1)[:MAX_URL])),
    (RESUME, lambda m: Resumed(int_of(m.group(1)))),
    (TOTAL_STEPS, lambda m: TotalSteps(int_of(m.group(1)))),
    (FINAL_VALIDATION, lambda m: parse_final_validation(m.group(1))),
    (FINAL_VALIDATION_MORE, lambda m: parse_final_validation(m.group(1), continued=True)),
)


def parse_segment(text: str) -> list[Event]:
    """Events in one cleaned segment of a line (see `clean`)."""
    progress = None
    for match in PROGRESS.finditer(text):
        rate = None
        if match.group(3):
            rate_match = RATE.search(match.group(3))
            if rate_match:
                value = float_or_none(rate_match.group(1), finite=True)
                if value is not None and value >= 0:
                    rate = value if rate_match.group(2) == "s/it" else (1 / value if value else None)
        progress = Progress(int_of(match.group(1)), int_of(match.group(2)), rate)
    if progress:
        return [progress]
    for pattern, build in LINE_EVENTS:
        found = pattern.search(text)
        if found:
            return [build(found)]
    return []


def parse_line(line: str) -> list[Event]:
    """Every event one log line carries (a tqdm line may hold several refreshes)."""
    return [event for text in clean(line) for event in parse_segment(text)]


def parse_lines(lines: Iterable[str]) -> list[Event]:
    return [event for line in lines for event in parse_line(line)]

