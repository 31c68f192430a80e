"""Backend `local`: the scripts run on this host (a bare-metal install, verl checkout as --run-dir)."""

from __future__ import annotations

import subprocess
from pathlib import Path

from verl_deploy.backends.base import DetachedProcess, start_detached, stop_group


class LocalBackend(DetachedProcess):
    name = "local"

    def start(self, scripts_dir: Path, attempt_dir: Path) -> dict:
        return start_detached(["bash", str(scripts_dir / "start_verl.sh")], attempt_dir, cwd=scripts_dir)

    def stop(self, handle: dict) -> None:
        stop_group(handle.get("pid"))
        log = Path(handle.get("log", ""))
        started_ray = log.is_file() and "reusing the Ray cluster" not in log.read_text(errors="replace")[:20000]
        if started_ray:  # the Ray head start_verl.sh started for this run, and only that one
            subprocess.run(["ray", "stop"], capture_output=True, timeout=60, check=False)
