"""Backend `docker`: the scripts are copied into the container and run there through `docker exec`.

`docker cp` runs on the host, the training inside the container (seed 001 rule 4). The host-side
`docker exec` client streams the output into the run's host log, so the watcher reads it
directly; the process inside writes its pid so `stop` can end its process group there.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from typing import TYPE_CHECKING, ClassVar

from verl_deploy.backends.container_setup import DockerError, docker, inspect
from verl_deploy.backends.handle import Handle
from verl_deploy.backends.host import HostBackend
from verl_deploy.backends.process import start_detached, stop_group
from verl_deploy.backends.protocol import Say, Target
from verl_deploy.findings import Finding, error
from verl_deploy.render import shell_quote

if TYPE_CHECKING:
    from verl_deploy.spec import RunSpec


RESTART_GRACE = 15.0  # seconds a stopped container is given to come back before it is called stopped


class DockerBackend(HostBackend):
    kind: ClassVar[str] = "docker"
    container: str

    def __init__(self, container: str, remote_base: str, reuse_ray: bool = False):
        self.container = container
        self.remote_base = remote_base.rstrip("/")
        self.reuse_ray = reuse_ray  # start_verl.sh then uses a Ray already running in the container

    @classmethod
    def configure(cls, spec: RunSpec, target: Target) -> tuple[dict, list[Finding]]:
        options, found = super().configure(spec, target)
        if not spec.container:
            found = [*found, error("container", "the docker backend needs a container", "pass --container NAME")]
        return options, found

    @classmethod
    def from_options(cls, options: dict, spec: RunSpec | None, container: str | None, run_dir: str) -> "DockerBackend":
        return cls(container or "", run_dir.rstrip("/") + "/verl-deploy-runs", reuse_ray=bool(options.get("reuse_ray")))

    def prepare(self, spec: RunSpec, say: Say) -> None:
        """The run's container: reused, started, or created (container_setup.py); DockerError when it cannot be."""
        from verl_deploy.backends.container_setup import ensure_container

        ensure_container(spec, say=say, warn=lambda text: say(f"warning: {text}"))

    def start(self, scripts_dir: Path, attempt_dir: Path) -> Handle:
        remote = f"{self.remote_base}/{attempt_dir.parent.name}/{attempt_dir.name}"
        made = docker(["exec", "--", self.container, "mkdir", "-p", "--", remote], timeout=60)
        if made.returncode != 0:
            raise DockerError(f"docker exec {self.container} mkdir: {made.stderr.strip()[-200:]}")
        copied = docker(["cp", "--", f"{scripts_dir}/.", f"{self.container}:{remote}"], timeout=120)
        if copied.returncode != 0:
            raise DockerError(f"docker cp into {self.container}: {copied.stderr.strip()[-200:]}")
        inner = start_command(remote)
        reuse = ["-e", "VERL_DEPLOY_REUSE_RAY=1"] if self.reuse_ray else []
        handle = start_detached(["docker", "exec", *reuse, "--", self.container, "bash", "-c", inner], attempt_dir)
        handle.container, handle.remote = self.container, remote
        return handle

    def stop(self, handle: Handle) -> None:
        remote = handle.remote
        if remote:
            # bash, not sh: dash (Ubuntu's and Debian's sh) refuses `kill -- -PGID` ("Illegal number: -")
            subprocess.run(["docker", "exec", "--", self.container, "bash", "-c", end_group_in(remote)],
                           capture_output=True, timeout=60, check=False)
        stop_group(handle, grace=5)

    def explain_end(self, handle: Handle) -> dict | None:
        """Why the training ended when its log does not say: the container stopped, restarted or vanished."""
        try:
            state = inspect(self.container)
            deadline = time.monotonic() + RESTART_GRACE
            while state.exists and not state.running and time.monotonic() < deadline:  # mid-`docker restart`?
                time.sleep(0.5)
                state = inspect(self.container)
        except DockerError:
            return None
        again = f"then `verl-deploy launch` again with the same --ckpts-dir: it resumes from the last checkpoint"
        failure: dict[str, object] = {"phase": None, "retryable": False, "lines": []}
        if not state.exists:
            return {**failure, "class": "container_gone", "cause": f"container {self.container} was removed while the training "
                    f"ran inside it", "fix": f"create it again (`verl-deploy container create`), {again}"}
        if not state.running:
            return {**failure, "class": "container_stopped", "cause": f"container {self.container} stopped ({state.status}) while "
                    f"the training ran inside it", "fix": f"`docker start {self.container}`, {again}"}
        if state.started_at and state.started_at > float(handle.spawned or 0):
            when = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(state.started_at))
            return {**failure, "class": "container_restarted", "cause": f"container {self.container} was restarted at {when}: "
                    f"the training inside it was ended", "fix": f"find out who restarted it (`docker events`), {again}"}
        return None


def end_group_in(remote: str) -> str:
    """A bash command (run in the container) ending the attempt's process group, only while it is ours.

    The pid file names the group leader started in `remote`; once it has ended, that pid may belong to
    another process in the container, whose working directory is not `remote`: it is left alone. Once
    checked, the group id stays reserved while any member lives, so the KILL reaches only our group.
    """
    quoted = shell_quote(remote)
    return (f'p="$(cat {quoted}/pid 2>/dev/null)"; case "$p" in ""|*[!0-9]*) exit 0 ;; esac; '
            f'here="$(cd -- {quoted} 2>/dev/null && pwd -P)"; '
            f'if [ -n "$here" ] && [ "$(readlink /proc/$p/cwd 2>/dev/null)" = "$here" ]; then '
            f'kill -TERM -- "-$p" 2>/dev/null; n=0; '  # up to 2 s for the group to leave, then KILL what stays
            f'while [ "$n" -lt 20 ] && kill -0 -- "-$p" 2>/dev/null; do sleep 0.1; n=$((n + 1)); done; '
            f'kill -KILL -- "-$p" 2>/dev/null; fi; true')


def start_command(remote: str) -> str:
    """The bash command (run in the container) starting the attempt in `remote` as its own process group.

    `remote` holds the run dir, a user's value: it is quoted once and handed to the inner shell as $0,
    never pasted into a second quoting level.
    """
    quoted = shell_quote(remote)
    return f"cd -- {quoted} && exec setsid -w bash -c 'echo $$ > \"$0/pid\"; exec bash start_verl.sh' {quoted}"
