"""The trackers a run logs to (--logger): are they verl's, for this release, and is their environment there.

Each tracker's settings and credentials (profiles/trackers.py names them) are taken from the
environment of `generate`/`launch`, or from the 0600 file ~/.config/verl-deploy/trackers.env
(KEY=VALUE lines, the environment wins), and reach the training only through the scripts'
0600 trackers.env, which start_verl.sh sources: never a command line, a script or a log, like
the SwanLab key. SwanLab keeps its own flow (--swanlab-*, swanlab.env).
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Mapping

from verl_deploy import boundedread
from verl_deploy.findings import Finding, error, warning
from verl_deploy.profiles.trackers import TRACKERS, supported
from verl_deploy.statedir import config_dir

FILE = "trackers.env"
MAX_FILE_BYTES = 64 * 1024


def user_file() -> Path:
    return config_dir() / FILE


def saved_values() -> dict[str, str]:
    """KEY=VALUE lines of ~/.config/verl-deploy/trackers.env (comments, blanks and `export ` allowed)."""
    try:
        text = boundedread.read_text(user_file(), MAX_FILE_BYTES)
    except (FileNotFoundError, NotADirectoryError):
        return {}
    except (OSError, boundedread.UnreadableFile):
        return {}
    values: dict[str, str] = {}
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        name, _, value = line.removeprefix("export ").partition("=")
        try:
            parts = shlex.split(value)
        except ValueError:
            parts = [value]
        values[name.strip()] = parts[0] if parts else ""
    return values


def tracker_names(spec) -> list[str]:
    """The trackers besides console and SwanLab (which have their own handling)."""
    return [n for n in spec.loggers if n not in ("console", "swanlab")]


def environment(spec, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """NAME -> value for the chosen trackers' environment, from the environment, else the user's trackers.env."""
    environ = os.environ if environ is None else environ
    saved = saved_values()
    values: dict[str, str] = {}
    for name in tracker_names(spec):
        for var in TRACKERS[name].env:
            value = environ.get(var) or saved.get(var)
            if value:
                values[var] = value
    return values


def file_text(values: dict[str, str]) -> str:
    return "".join(f"{name}={shlex.quote(value)}\n" for name, value in sorted(values.items()))


def tracker_findings(spec, environ: Mapping[str, str] | None = None) -> list[Finding]:
    found: list[Finding] = []
    accepted = supported(spec.verl_version)
    for name in spec.loggers:
        if name not in accepted:
            found.append(error("logger", f"verl {spec.verl_version} has no {name} tracker (it has: "
                               f"{', '.join(accepted)})", f"drop {name} from --logger"))
    values = environment(spec, environ)
    where = f"in the environment or in {user_file()} (KEY=VALUE, mode 0600)"
    for name in tracker_names(spec):
        tracker = TRACKERS[name]
        missing = [v for v in tracker.required if v not in values]
        if missing:
            found.append(error("logger", f"the {name} tracker needs {', '.join(missing)}: verl stops at start "
                               "without them", f"set {', '.join(missing)} {where}"))
            continue
        credential = [v for v in tracker.secrets if v in values]
        if tracker.secrets and not credential and not tracker.required:
            login = f", or {tracker.login}" if tracker.login else ""
            found.append(warning("logger", f"the {name} tracker has no credential here ({' or '.join(tracker.secrets)})",
                                 f"set it {where}{login}"))
    if "mlflow" in spec.loggers and "MLFLOW_TRACKING_URI" not in values:
        found.append(warning("logger", "MLFLOW_TRACKING_URI is not set: verl's mlflow tracker then writes to "
                             "sqlite:////tmp/mlruns.db on the node that runs the trainer",
                             f"set MLFLOW_TRACKING_URI {where}"))
    return found
