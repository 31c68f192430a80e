"""The local calibration log: device OOMs the recovery ladder saw, and what it changed.

One JSON object per line in ``<state dir>/memory-calibration.jsonl``: the model, layout and device
memory the OOM happened on, the phase, the memory features that were on, and what the ladder
added (a feature, or ``gpu_memory_utilization=0.5``). The estimate reads the entries for the same
model x layout x device: a configuration that already ran out of memory in a phase does not fit
until it has what the ladder added. A run that finished cleanly is logged too (``outcome: ran``, with
the device peak verl printed as ``perf/max_memory_reserved_gb``, and the workload: lengths, batch,
token budget): the same model x layout x device x workload x features then fits, whatever the
formulas say. The estimator reads only this file, never a run record.
Every line may be damaged: bad lines are skipped, the file is read up to a bound.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path

from verl_deploy import boundedread
from verl_deploy.statedir import state_dir

LOG_NAME = "memory-calibration.jsonl"
MAX_BYTES = 1_000_000
MAX_ENTRIES = 2000


@dataclass(frozen=True)
class Entry:
    model: str  # the model's identity (ModelShape.identity: architecture and dimensions), not its directory
    layout: str
    device_gb: float
    phase: str
    features_on: tuple[str, ...]
    added: str
    name: str = ""  # the model's directory name, for people reading the log and plan
    time: str = ""  # when the ladder saw it (UTC)
    outcome: str = "oom"  # "oom" (the ladder saw one) or "ran" (the run finished cleanly)
    peak_gb: float | None = None  # the device peak the log printed (perf/max_memory_reserved_gb), for "ran"
    workload: str = ""  # lengths, batch and token budget (Setup.workload()), for "ran"

    def matches(self, model: str, layout: str, device_gb: float) -> bool:
        return self.model == model and self.layout == layout and abs(self.device_gb - device_gb) < 0.5


def log_path() -> Path:
    return state_dir() / LOG_NAME


def append(entry: Entry, path: Path | None = None) -> None:
    path = path or log_path()
    path.parent.mkdir(parents=True, exist_ok=True)
    data = {"time": entry.time or time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "model": entry.model,
            "name": entry.name, "layout": entry.layout, "device_gb": entry.device_gb,
            "phase": entry.phase, "features_on": list(entry.features_on), "added": entry.added}
    if entry.outcome != "oom":
        data.update(outcome=entry.outcome, peak_gb=entry.peak_gb, workload=entry.workload)
    line = json.dumps(data)
    with open(path, "a", encoding="utf-8") as handle:  # one short line per write: appends do not interleave
        handle.write(line + "\n")


def _entry(data: object) -> Entry | None:
    if not isinstance(data, dict):
        return None
    try:
        features = data.get("features_on") or []
        if not isinstance(features, list):
            return None
        peak = data.get("peak_gb")
        return Entry(str(data["model"])[:200], str(data["layout"])[:200], float(data["device_gb"]),
                     str(data["phase"])[:40], tuple(str(f)[:40] for f in features[:10]), str(data["added"])[:80],
                     str(data.get("name") or "")[:200], str(data.get("time") or "")[:40],
                     "ran" if data.get("outcome") == "ran" else "oom",
                     float(peak) if isinstance(peak, (int, float)) and not isinstance(peak, bool) else None,
                     str(data.get("workload") or "")[:200])
    except (KeyError, TypeError, ValueError):
        return None


def read(path: Path | None = None) -> list[Entry]:
    path = path or log_path()
    try:
        raw = boundedread.read_tail(path, MAX_BYTES + 1)  # a FIFO or device in its place: no entries, never a block
    except (OSError, boundedread.UnreadableFile):
        return []
    if len(raw) > MAX_BYTES:
        raw = raw.partition(b"\n")[2]  # drop the partial first line
    entries = []
    for line in raw.decode("utf-8", errors="replace").splitlines()[-MAX_ENTRIES:]:
        try:
            entry = _entry(boundedread.parse_json(line, "calibration line"))
        except ValueError:  # UnreadableFile too: a line nested too deep is skipped like any damaged one
            continue
        if entry:
            entries.append(entry)
    return entries


def lessons(entries: list[Entry], model: str, layout: str, device_gb: float) -> list[Entry]:
    """The OOMs the ladder saw for this model x layout x device (what the estimate must respect)."""
    return [e for e in entries if e.outcome == "oom" and e.matches(model, layout, device_gb)]


def clean_runs(entries: list[Entry], model: str, layout: str, device_gb: float, workload: str,
               features_on: tuple[str, ...]) -> list[Entry]:
    """Clean runs of the very same model x layout x device x workload with the same memory features."""
    return [e for e in entries if e.outcome == "ran" and e.matches(model, layout, device_gb)
            and e.workload == workload and set(e.features_on) == set(features_on)]

