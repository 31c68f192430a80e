"""Backend `docker`: the scripts are copied into the container and run there through `docker exec`.

`docker cp` runs on the host, the training inside the container (seed 001 rule 4). The host-side
`docker exec` client streams the output into the run's host log, so the watcher reads it
directly; the process inside writes its pid so `stop` can end its process group there.
"""

from __future__ import annotations

import subprocess
from pathlib import Path

from verl_deploy.backends.base import DetachedProcess, start_detached, stop_group
from verl_deploy.backends.docker import DockerError, docker


class DockerBackend(DetachedProcess):
    name = "docker"

    def __init__(self, container: str, remote_base: str):
        self.container = container
        self.remote_base = remote_base.rstrip("/")

    def start(self, scripts_dir: Path, attempt_dir: Path) -> dict:
        remote = f"{self.remote_base}/{attempt_dir.parent.name}/{attempt_dir.name}"
        made = docker(["exec", "--", self.container, "mkdir", "-p", "--", remote], timeout=60)
        if made.returncode != 0:
            raise DockerError(f"docker exec {self.container} mkdir: {made.stderr.strip()[-200:]}")
        copied = docker(["cp", "--", f"{scripts_dir}/.", f"{self.container}:{remote}"], timeout=120)
        if copied.returncode != 0:
            raise DockerError(f"docker cp into {self.container}: {copied.stderr.strip()[-200:]}")
        inner = f"cd {remote} && exec setsid -w bash -c 'echo $$ > {remote}/pid; exec bash start_verl.sh'"
        handle = start_detached(["docker", "exec", "--", self.container, "bash", "-c", inner], attempt_dir)
        handle.update(container=self.container, remote=remote)
        return handle

    def stop(self, handle: dict) -> None:
        remote = handle.get("remote")
        if remote:
            subprocess.run(["docker", "exec", "--", self.container, "sh", "-c",
                            f"kill -TERM -- -$(cat {remote}/pid) 2>/dev/null; sleep 2; "
                            f"kill -KILL -- -$(cat {remote}/pid) 2>/dev/null; true"],
                           capture_output=True, timeout=60, check=False)
        stop_group(handle.get("pid"), grace=5)
