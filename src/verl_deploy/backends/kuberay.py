"""Backend `kuberay`: each attempt is a RayJob (rayjob.yaml) applied with the user's kubectl context.

`start` applies the attempt's rayjob.yaml (a ConfigMap with run_training.sh and the RayJob; the
SwanLab key, when there is one, goes to its Secret through kubectl's standard input, never into
a file or argv) and starts a detached pump. The pump reads `kubectl get rayjob NAME -o json`
(status.jobDeploymentStatus and status.jobStatus), writes them to scheduler.json, streams the
submitter's logs (`kubectl logs -f job/NAME`: the driver's output in K8sJobMode) into the run's
log, and exits with the job's result. A failed attempt is re-created as a new RayJob by the
supervisor (next memory feature, resume); `stop` deletes the RayJob.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

from typing import TYPE_CHECKING, ClassVar

from verl_deploy.backends.handle import Handle
from verl_deploy.backends.process import start_detached
from verl_deploy.backends.protocol import BackendError
from verl_deploy.backends.scheduler_options import OptionsBackend, SchedulerOptions
from verl_deploy.findings import Finding, error
from verl_deploy.statedir import write_json

if TYPE_CHECKING:
    from verl_deploy.compiler import Plan
    from verl_deploy.spec import RunSpec

POLL_SECONDS = 2.0
TERMINAL_DEPLOYMENT = ("Complete", "Failed", "ValidationFailed")
TERMINAL_JOB = ("SUCCEEDED", "FAILED", "STOPPED")


class KubeError(BackendError):
    """One line for the user."""


def kubectl(args: list[str], namespace: str | None = None, timeout: float = 60, input: str | None = None):
    argv = ["kubectl", *(["--namespace", namespace] if namespace else []), *args]
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, input=input,
                              stdin=None if input is not None else subprocess.DEVNULL)
    except FileNotFoundError:
        raise KubeError("kubectl is not installed here: install it and select the cluster's context") from None
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 124, "", f"kubectl gave no answer within {timeout:g} s")


def job_name(attempt_dir: Path) -> str:
    """A Kubernetes name for the attempt: vd-<run id>-a<n> (lower case, at most 50 characters)."""
    run = re.sub(r"[^a-z0-9-]", "-", attempt_dir.parent.name.lower()).strip("-")
    n = attempt_dir.name.rsplit("-", 1)[-1]
    return f"vd-{run}"[:44].rstrip("-") + f"-a{n}"


def check_cluster(namespace: str | None) -> str | None:
    """None when kubectl reaches a cluster with KubeRay's RayJob CRD, else why not (one line)."""
    found = kubectl(["get", "crd", "rayjobs.ray.io", "-o", "name"], timeout=30)
    if found.returncode != 0:
        return (f"kubectl cannot see the RayJob CRD (rayjobs.ray.io): {found.stderr.strip()[-200:]} — install the "
                f"KubeRay operator, or select the cluster's context (kubectl config use-context)")
    return None


def secret_manifest(name: str, namespace: str | None, key: str) -> str:
    metadata = {"name": name, **({"namespace": namespace} if namespace else {}),
                "labels": {"app.kubernetes.io/managed-by": "verl-deploy"}}
    return json.dumps({"apiVersion": "v1", "kind": "Secret", "metadata": metadata, "type": "Opaque",
                       "stringData": {"api-key": key}})


class KubeRayBackend(OptionsBackend):
    kind: ClassVar[str] = "kuberay"

    @classmethod
    def check_cluster(cls, spec: RunSpec, options: SchedulerOptions) -> list[Finding]:
        try:
            problem = check_cluster(options.namespace)
        except KubeError as exc:
            problem = str(exc)
        return [error("backend", problem, "see the README's KubeRay section")] if problem else []

    def extra_files(self, plan: Plan, scripts_dir: Path) -> dict[str, str]:
        from verl_deploy.backends.kuberay_manifest import render_rayjob
        from verl_deploy.render import render_scripts

        run_training = render_scripts(plan)["run_training.sh"]  # the same text the set writes beside it
        return {"rayjob.yaml": render_rayjob(plan, self.options, run_training, job_name(scripts_dir.parent))}

    def start(self, scripts_dir: Path, attempt_dir: Path) -> Handle:
        namespace = self.options.namespace
        assert self.spec is not None  # a run is started from its spec, never from a damaged record
        key = self.spec.swanlab_api_key
        if self.spec.swanlab_on and key is not None:
            made = kubectl(["apply", "-f", "-"], input=secret_manifest(self.options.swanlab_secret, namespace,
                                                                      key.get_secret_value()))
            if made.returncode != 0:
                raise KubeError(f"kubectl could not store the SwanLab key in Secret {self.options.swanlab_secret}: "
                                f"{made.stderr.strip()[-200:]}")
        applied = kubectl(["apply", "-f", str(scripts_dir / "rayjob.yaml")])
        if applied.returncode != 0:
            raise KubeError(f"kubectl apply rayjob.yaml failed: {applied.stderr.strip()[-300:]}")
        name = job_name(attempt_dir)
        state_file = attempt_dir / "scheduler.json"
        handle = start_detached([sys.executable, "-m", "verl_deploy.backends.kuberay", name, namespace or "",
                                 str(state_file)], attempt_dir)
        handle.rayjob, handle.namespace, handle.scheduler_file = name, namespace, str(state_file)
        return handle

    def elsewhere(self, handle: Handle) -> str:
        namespace = handle.namespace or "default"
        cluster = (handle.scheduler or {}).get("cluster") or f"the RayJob {handle.rayjob}'s cluster"
        return (f"the RayJob {handle.rayjob} runs in pods of namespace {namespace}, not on this host; run it in its "
                f"head pod: `kubectl exec -n {namespace} POD --` (POD: `kubectl get pods -n {namespace} -l "
                f"ray.io/node-type=head` of {cluster})")

    def cancel(self, handle: Handle) -> None:
        name, namespace = handle.rayjob, handle.namespace
        if name:
            try:
                kubectl(["delete", "rayjob", name, "--ignore-not-found", "--wait=false"], namespace)
                kubectl(["delete", "configmap", f"{name}-scripts", "--ignore-not-found", "--wait=false"], namespace)
            except KubeError:
                pass


# -- the pump --------------------------------------------------------------------------------------------

def read_status(document: dict) -> dict:
    """The parts of a RayJob's status the run record keeps."""
    status = document.get("status") if isinstance(document, dict) else None
    status = status if isinstance(status, dict) else {}
    return {"scheduler": "kuberay", "state": status.get("jobDeploymentStatus") or "New",
            "job_status": status.get("jobStatus") or None, "reason": status.get("reason") or None,
            "message": (str(status.get("message"))[:500] if status.get("message") else None),
            "cluster": status.get("rayClusterName"), "dashboard": status.get("dashboardURL"),
            "queued": (status.get("jobDeploymentStatus") or "New") not in ("Complete", "Failed", "ValidationFailed")
                      and (status.get("jobStatus") or "PENDING") == "PENDING"}


def is_done(state: dict) -> bool:
    return state["state"] in TERMINAL_DEPLOYMENT or (state["job_status"] in TERMINAL_JOB
                                                     and state["state"] not in ("Running", "Initializing"))


def outcome(state: dict) -> dict:
    doc = dict(state)
    if state["state"] in ("Failed", "ValidationFailed") and state["job_status"] != "FAILED":
        # the RayJob failed around the training (submission, deadlines, validation), not in it
        doc["failure"] = {"class": "scheduler", "phase": None, "retryable": False,
                          "cause": f"KubeRay: RayJob {state['state']} ({state['reason'] or 'no reason'}): "
                                   f"{state['message'] or ''}".strip(),
                          "fix": "see `kubectl describe rayjob` and the pods' events"}
    return doc


def pump(name: str, namespace: str, state_file: str) -> int:
    ns = namespace or None

    def say(text: str) -> None:
        sys.stdout.write(f"[verl-deploy] rayjob {name}: {text}\n")
        sys.stdout.flush()

    say("applied")
    last, misses, logs, seen = None, 0, None, False
    state: dict = {}
    while True:
        got = kubectl(["get", "rayjob", name, "-o", "json"], ns, timeout=30)
        if got.returncode != 0:
            gone = "NotFound" in got.stderr or "not found" in got.stderr
            misses += 1
            if gone and seen:
                say("deleted")
                write_json(Path(state_file), {**(state or {"scheduler": "kuberay"}), "state": "Deleted"})
                _end_logs(logs)
                return 143
            if misses >= 30:
                say(f"kubectl cannot read the RayJob: {got.stderr.strip()[-200:]}")
                return 1
            time.sleep(POLL_SECONDS)
            continue
        misses, seen = 0, True
        try:
            state = read_status(json.loads(got.stdout))
        except ValueError:
            time.sleep(POLL_SECONDS)
            continue
        key = (state["state"], state["job_status"], state["reason"])
        if key != last:
            last = key
            write_json(Path(state_file), outcome(state))
            say(f"{state['state']}" + (f", job {state['job_status']}" if state["job_status"] else "")
                + (f" ({state['reason']})" if state["reason"] else ""))
        if logs is None and state["job_status"] in ("RUNNING", *TERMINAL_JOB):
            logs = subprocess.Popen(["kubectl", *(["--namespace", ns] if ns else []), "logs", "-f", f"job/{name}"],
                                    stdout=sys.stdout.buffer, stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        if is_done(state):
            break
        time.sleep(POLL_SECONDS)
    _end_logs(logs, wait=30)
    if state["message"]:
        say(state["message"])
    return 0 if state["job_status"] == "SUCCEEDED" else 143 if state["job_status"] == "STOPPED" else 1


def _end_logs(process, wait: float = 0) -> None:
    if process is None:
        return
    try:
        process.wait(timeout=wait)
    except subprocess.TimeoutExpired:
        process.terminate()
        process.wait(timeout=5)
    sys.stdout.flush()


if __name__ == "__main__":
    sys.exit(pump(sys.argv[1], sys.argv[2], sys.argv[3]))
