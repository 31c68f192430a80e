"""Backend `ray`: the training as a Ray job on an existing cluster (Ray's job submission API).

The job runs run_training.sh from a working directory Ray uploads (the attempt's scripts, without
swanlab.env: the API key never goes into the runtime environment, which the dashboard shows);
the device and SwanLab variables start_verl.sh would export go in `env_vars`. A small detached
pump streams the job's logs into the run's host log and ends with the job's result, so the
supervisor watches a Ray job exactly like a local process. Every call carries the cluster's token
when it uses token authentication (rayauth.headers_for: in a request header, never in argv, the
job's runtime environment or a file); the pump finds it itself, from the environment it inherits.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from verl_deploy import rayauth
from verl_deploy.backends.handle import Handle
from verl_deploy.backends.process import start_detached
from verl_deploy.backends.protocol import ScheduledBackend, Target, Where
from verl_deploy.backends.stacks import Taken
from verl_deploy.findings import Finding, error
from verl_deploy.profiles.trackers import TRACKERS

if TYPE_CHECKING:
    from verl_deploy.spec import RunSpec

SECRET_NAMES = {"SWANLAB_API_KEY", rayauth.TOKEN_ENV,
                *(name for tracker in TRACKERS.values() for name in tracker.secrets)}  # the trackers' credentials
LEFT_OUT = ["swanlab.env", rayauth.TOKEN_FILE, "trackers.env"]  # never uploaded with the working directory


def quiet_ray_logging() -> None:
    """Ray's INFO lines ("Uploading package gcs://...") are not ours to print: only its warnings pass.

    Ray hangs its handler on the `ray` logger and some modules set their own logger to INFO, so
    the handler's level is raised too, which catches every `ray.*` record that reaches it.
    """
    import logging

    ray_logger = logging.getLogger("ray")
    ray_logger.setLevel(logging.WARNING)
    for handler in ray_logger.handlers:
        handler.setLevel(logging.WARNING)


def client(address: str):
    """Ray's JobSubmissionClient with the cluster's token header (rayauth.AuthError when one is wanted and
    none is found: one line with the fix, before Ray's own multi-line AuthenticationError)."""
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError as exc:  # pragma: no cover - the extra is installed for tests
        raise RuntimeError("the ray backend needs Ray here: pip install 'verl-deploy[ray]'") from exc
    quiet_ray_logging()
    headers = rayauth.headers_for(address)
    return JobSubmissionClient(address, headers=headers or None)


def job_env(scripts_dir: Path, extra: dict[str, str]) -> dict[str, str]:
    plan = json.loads((scripts_dir / "plan.json").read_text())
    env = {k: str(v) for k, v in plan.get("environment", {}).items()}
    swanlab = plan.get("swanlab_environment")  # what start_verl.sh exports: the names swanlab reads
    if isinstance(swanlab, dict):
        env.update({str(k): str(v) for k, v in swanlab.items()})
    env.update({k: v for k, v in extra.items() if k not in SECRET_NAMES})
    return env


class RayJobsBackend(ScheduledBackend):
    kind: ClassVar[str] = "ray"
    PUMP_WAIT: ClassVar[float] = 30.0

    def __init__(self, address: str, extra_env: dict[str, str] | None = None):
        self.address = address
        self.extra_env = dict(extra_env or {})

    @classmethod
    def configure(cls, spec: RunSpec, target: Target) -> tuple[dict, list[Finding]]:
        """The job server's address and the --job-env variables; refused: no address, a secret in the job's
        environment, a cluster that does not answer or could never place the layout."""
        address = target.ray_address
        if not address:
            return {}, [error("ray_address", "the ray backend needs the cluster's job server",
                              "pass --ray-address http://HEAD:8265 (or set RAY_API_SERVER_ADDRESS)")]
        env, found = _job_env(target.job_env)
        return {"address": address, "env": env}, found + _cluster_findings(spec, address)

    @classmethod
    def from_options(cls, options: dict, spec: RunSpec | None, container: str | None, run_dir: str) -> "RayJobsBackend":
        return cls(options.get("address") or "", options.get("env"))  # "": refused before a launch, said there

    def where(self) -> Where:
        return Where(ray_address=self.address)

    def start(self, scripts_dir: Path, attempt_dir: Path) -> Handle:
        submission_id = f"verl-deploy-{attempt_dir.parent.name}-{attempt_dir.name}"
        job_id = client(self.address).submit_job(
            entrypoint="bash run_training.sh", submission_id=submission_id,
            runtime_env={"working_dir": str(scripts_dir), "excludes": list(LEFT_OUT),
                         "env_vars": job_env(scripts_dir, self.extra_env)},
            metadata={"tool": "verl-deploy", "run": attempt_dir.parent.name})
        handle = start_detached([sys.executable, "-m", "verl_deploy.backends.rayjobs", self.address, job_id],
                                attempt_dir)
        handle.job_id, handle.address = job_id, self.address
        return handle

    def check_stop(self, handle: Handle) -> None:
        """rayauth.AuthError when the cluster wants a token we lack: the job would run on with no one watching."""
        client(self.address)

    def cancel(self, handle: Handle) -> None:
        try:
            client(self.address).stop_job(handle.job_id)
        except Exception:  # already gone: nothing to stop
            pass

    def elsewhere(self, handle: Handle) -> str:
        return (f"the Ray job {handle.job_id} runs on the nodes of the Ray cluster at {self.address}; see its dashboard "
                "(Jobs -> the job's actors -> Stack Trace; Cluster -> each node's devices) or run it on each node")

    def evidence(self, handle: Handle, folder: Path, deadline: float) -> Taken:
        """Where the stacks are, and the job server's own record of the job (status, message, driver), over its
        REST API, with the cluster's token when it wants one (a refusal is one line with the fix, never a bare 401)."""
        taken = super().evidence(handle, folder, deadline)
        if not handle.job_id:
            return taken
        try:
            info = rayauth.get_json(self.address, f"/api/jobs/{handle.job_id}", timeout=15, limit=1 << 20)
        except (OSError, ValueError, rayauth.AuthError) as exc:
            taken.problems.append(f"ray job {handle.job_id}: {exc}")
            return taken
        (folder / "ray-job.json").write_text(json.dumps(info, indent=2) + "\n")
        return taken


def _job_env(items: tuple[str, ...]) -> tuple[dict[str, str], list[Finding]]:
    """--job-env NAME[=VALUE] as the job's variables; a credential is refused (the dashboard shows them)."""
    env: dict[str, str] = {}
    found: list[Finding] = []
    for item in items:
        name, sep, value = item.partition("=")
        if name == "SWANLAB_API_KEY":
            found.append(error("job-env", "the SwanLab key must not go into the job's runtime environment (the "
                                          "dashboard shows it)", "log in on the nodes (`verl-deploy swanlab login`) instead"))
            continue
        if name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
            found.append(error("job-env", f"{name} must not go into the job's runtime environment (the dashboard "
                                          "shows it)", "the cluster's own processes have its token; verl-deploy sends "
                                                       "yours in a request header"))
            continue
        env[name] = value if sep else os.environ.get(name, "")
    return env, found


def _cluster_findings(spec: RunSpec, address: str) -> list[Finding]:
    """The cluster answers as a Ray job server (with our token), Ray is here, and the layout can be placed."""
    from verl_deploy.backends.raycluster import check_cluster, cluster_nodes, cluster_version

    try:
        nodes = cluster_nodes(address)
    except rayauth.AuthError as exc:  # one line naming the variables to set, never a bare 401
        return [error("ray_address", exc.problem, exc.fix)]
    except (OSError, ValueError) as exc:
        return [error("ray_address", f"{address} does not answer as a Ray job server: {exc}",
                      "check the address and that the head runs the dashboard (port 8265)")]
    try:
        import ray

        local_version = ray.__version__
    except ImportError:
        return [error("backend", "the ray backend needs Ray here", "pip install 'verl-deploy[ray]'")]
    return check_cluster(spec, nodes, cluster_version(address), local_version)


def pump(address: str, job_id: str) -> int:
    """Write the job's logs to stdout as they come; exit 0 if it succeeded, 1 if it failed, 143 if stopped."""
    import asyncio
    import time

    from ray.job_submission import JobStatus

    try:
        jobs = client(address)
    except rayauth.AuthError as exc:
        sys.stdout.write(f"[verl-deploy] ray job {job_id}: cannot follow it: {exc}\n")
        return 1

    async def tail() -> None:
        async for chunk in jobs.tail_job_logs(job_id):
            sys.stdout.write(chunk)
            sys.stdout.flush()

    try:
        asyncio.run(tail())
    except Exception as exc:  # the stream broke: fall back to the final logs
        sys.stdout.write(jobs.get_job_logs(job_id)[-65536:] + f"\n[verl-deploy] log stream ended: {exc}\n")
    for _ in range(100):
        status = jobs.get_job_status(job_id)
        if status in (JobStatus.SUCCEEDED, JobStatus.FAILED, JobStatus.STOPPED):
            break
        time.sleep(0.2)
    info = jobs.get_job_info(job_id)
    sys.stdout.write(f"[verl-deploy] ray job {job_id}: {status} {info.message or ''}\n")
    return {JobStatus.SUCCEEDED: 0, JobStatus.STOPPED: 143}.get(status, 1)


if __name__ == "__main__":
    sys.exit(pump(sys.argv[1], sys.argv[2]))
