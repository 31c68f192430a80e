"""Backend `local`: the scripts run on this host (a bare-metal install, verl checkout as --run-dir)."""

from __future__ import annotations

import os
import secrets
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from verl_deploy.backends.handle import Handle
from verl_deploy.backends.host import HostBackend
from verl_deploy.backends.process import start_detached, stop_group
from verl_deploy.backends.rayprocs import started_session, stop_session

if TYPE_CHECKING:
    from verl_deploy.spec import RunSpec


class LocalBackend(HostBackend):
    kind: ClassVar[str] = "local"

    def __init__(self, reuse_ray: bool = False):
        self.reuse_ray = reuse_ray

    @classmethod
    def from_options(cls, options: dict, spec: RunSpec | None, container: str | None, run_dir: str) -> "LocalBackend":
        return cls(reuse_ray=bool(options.get("reuse_ray")))

    def start(self, scripts_dir: Path, attempt_dir: Path) -> Handle:
        # a temp dir of its own (short: Ray's unix sockets live under it) so its Ray is found and stopped alone
        env = {"VERL_DEPLOY_RAY_TEMP_DIR": f"/tmp/vdr-{secrets.token_hex(4)}"}
        if self.reuse_ray:
            env["VERL_DEPLOY_REUSE_RAY"] = "1"
        handle = start_detached(["bash", str(scripts_dir / "start_verl.sh")], attempt_dir, cwd=scripts_dir, env=env)
        handle.ray_temp_dir = env["VERL_DEPLOY_RAY_TEMP_DIR"]
        return handle

    def stop(self, handle: Handle) -> None:
        stop_group(handle)
        # the Ray head start_verl.sh started for this run (its trap usually did it already), and only that one
        stop_session(started_session(handle.log))
        try:
            os.rmdir(handle.ray_temp_dir or "")  # ours, and only if empty: Ray's session logs are kept
        except OSError:
            pass
