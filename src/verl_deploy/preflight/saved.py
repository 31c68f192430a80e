"""Detected facts kept between commands: `check` saves them, `plan`/`generate` start from them.

Only for the same host and for a day: a host's devices and paths change, and stale facts
silently reused would be worse than none.
"""

from __future__ import annotations

import json
import socket
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Iterable, Mapping

from verl_deploy import boundedread
from verl_deploy.statedir import state_dir

DETECTED_FILE = "detected.json"
DETECTED_MAX_AGE = 24 * 3600
MAX_DETECTED_BYTES = 1 << 20  # a few KiB when `check` wrote it


def save_detected(detected: Mapping[str, Any], *, given: Iterable[str] = ()) -> Path:
    """Save what was found. A field the command was given explicitly was not probed this time, so what an
    earlier check found for it is kept (an explicit --socket-ifname must not wipe the detected interface)."""
    path = state_dir() / DETECTED_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    previous, _ = load_detected()
    values = {k: v for k, v in previous.items() if k in set(given) and k not in detected}
    values.update(detected)
    record = {"host": socket.gethostname(), "time": datetime.now(timezone.utc).isoformat(timespec="seconds"),
              "values": values}
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(record, indent=2) + "\n")
    tmp.replace(path)
    return path


def load_detected(max_age: float = DETECTED_MAX_AGE, problems: list[str] | None = None) -> tuple[dict[str, Any], str | None]:
    """What the last `check` on this host detected, if recent: (values, when). A damaged file, a FIFO or
    /dev/zero in its place counts as none (`check` writes a new one); why goes to `problems` if given."""
    path = state_dir() / DETECTED_FILE
    try:
        record = boundedread.read_json(path, MAX_DETECTED_BYTES)
        when = datetime.fromisoformat(record["time"])
    except boundedread.UnreadableFile as exc:
        if problems is not None:
            problems.append(f"ignored {exc}; `verl-deploy check` writes a new one")
        return {}, None
    except (OSError, ValueError, KeyError, TypeError):
        return {}, None
    age = (datetime.now(timezone.utc) - when).total_seconds()
    if record.get("host") != socket.gethostname() or age > max_age or not isinstance(record.get("values"), dict):
        return {}, None
    return record["values"], record["time"]
