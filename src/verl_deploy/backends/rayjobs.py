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
import sys
import time
from pathlib import Path

from verl_deploy import rayauth
from verl_deploy.profiles.trackers import TRACKERS
from verl_deploy.backends.base import DetachedProcess, exit_code, recorded_alive, start_detached, stop_group

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


class RayJobsBackend(DetachedProcess):
    name = "ray"

    def __init__(self, address: str, extra_env: dict[str, str] | None = None):
        self.address = address
        self.extra_env = dict(extra_env or {})

    def start(self, scripts_dir: Path, attempt_dir: Path) -> dict:
        submission_id = f"verl-deploy-{attempt_dir.parent.name}-{attempt_dir.name}"
        job_id = client(self.address).submit_job(
            entrypoint="bash run_training.sh", submission_id=submission_id,
            runtime_env={"working_dir": str(scripts_dir), "excludes": list(LEFT_OUT),
                         "env_vars": job_env(scripts_dir, self.extra_env)},
            metadata={"tool": "verl-deploy", "run": attempt_dir.parent.name})
        handle = start_detached([sys.executable, "-m", "verl_deploy.backends.rayjobs", self.address, job_id],
                                attempt_dir)
        handle.update(job_id=job_id, address=self.address)
        return handle

    def check_stop(self, handle: dict) -> None:
        """rayauth.AuthError when the cluster wants a token we lack: the job would run on with no one watching."""
        client(self.address)

    def stop(self, handle: dict) -> None:
        try:
            client(self.address).stop_job(handle["job_id"])
        except Exception:  # already gone: nothing to stop
            pass
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and exit_code(handle) is None and recorded_alive(handle):
            time.sleep(0.2)  # the pump writes the last lines and the result
        stop_group(handle, grace=2)


def pump(address: str, job_id: str) -> int:
    """Write the job's logs to stdout as they come; exit 0 if it succeeded, 1 if it failed, 143 if stopped."""
    import asyncio

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
