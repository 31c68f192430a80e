"""`generate --scheduler kuberay` against KubeRay's own RayJob CRD, and `launch --backend kuberay`'s state machine.

No Kubernetes cluster is reachable here. The manifest is validated against the v1 OpenAPI schema of
the RayJob CRD of KubeRay v1.7.0 (fixtures/kuberay, see SOURCES.md), with unknown fields refused
(the API server would silently prune them). The backend runs against a fake kubectl
(fakes/kube/kubectl) that replays `kubectl get rayjob -o json` answers shaped by that CRD and runs
the manifest's entrypoint with the stand-in trainer, so recovery, resume and stop are exercised
for real on this host.
"""

from __future__ import annotations

import copy
import gzip
import json
import os
import shutil
import subprocess
import time
from functools import lru_cache
from pathlib import Path

import pytest
import yaml

from conftest import FIXTURES, VERL_BIN, run_cli
from test_ray import STANDIN

jsonschema = pytest.importorskip("jsonschema")
CRD = FIXTURES / "kuberay" / "ray.io_rayjobs-v1.7.0.yaml.gz"
FAKE_KUBECTL = Path(__file__).parent / "fakes" / "kube"


def closed(schema):
    """The schema with unknown properties refused where the API server would prune them."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if (node.get("type") == "object" and "properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


@lru_cache(maxsize=1)
def rayjob_schema() -> dict:
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)  # libyaml: the CRD is 1.4 MB
    crd = yaml.load(gzip.decompress(CRD.read_bytes()), Loader=loader)
    version = next(v for v in crd["spec"]["versions"] if v["name"] == "v1")
    return closed(version["schema"]["openAPIV3Schema"])


def validate(doc: dict) -> None:
    jsonschema.validate(doc, rayjob_schema(), cls=jsonschema.Draft7Validator)


@pytest.mark.parametrize("device,nnodes", [("npu", 1), ("npu", 2), ("gpu", 1), ("gpu", 4)])
def test_the_rayjob_manifest_is_valid_for_the_crd(tmp_path, device, nnodes):
    out = tmp_path / "out"
    extra = ["--framework", "fsdp"] if device == "gpu" else []
    result = run_cli("generate", "--output-dir", str(out), "--scheduler", "kuberay", "--device", device,
                     "--nnodes", str(nnodes), *extra, "--swanlab", "yes", "--swanlab-host", "http://10.0.0.9:8000",
                     "--k8s-volume", "models:/mnt/public", "--namespace", "rl",
                     env={"SWANLAB_API_KEY": "sk-kube-secret-4242"})
    assert result.returncode == 0, result.stderr
    text = (out / "rayjob.yaml").read_text()
    assert "sk-kube-secret-4242" not in text
    configmap, rayjob = list(yaml.safe_load_all(text))
    validate(rayjob)
    assert configmap["kind"] == "ConfigMap" and configmap["data"]["run_training.sh"] == (out / "run_training.sh").read_text()
    spec = rayjob["spec"]
    assert spec["backoffLimit"] == 0 and spec["shutdownAfterJobFinishes"] is True
    assert rayjob["metadata"]["namespace"] == "rl"
    resource = "huawei.com/Ascend910" if device == "npu" else "nvidia.com/gpu"
    head = spec["rayClusterSpec"]["headGroupSpec"]
    container = head["template"]["spec"]["containers"][0]
    assert container["resources"]["limits"] == {resource: 8}
    assert {"name": "data-0", "mountPath": "/mnt/public"} in container["volumeMounts"]
    key = next(e for e in container["env"] if e["name"] == "SWANLAB_API_KEY")
    assert key["valueFrom"]["secretKeyRef"] == {"name": "verl-deploy-swanlab", "key": "api-key", "optional": True}
    workers = spec["rayClusterSpec"].get("workerGroupSpecs", [])
    assert sum(w["replicas"] for w in workers) == nnodes - 1
    if device == "npu":
        assert json.loads(head["rayStartParams"]["resources"].strip("'")) == {"NPU": 8}
    assert "run_training.sh" in spec["entrypoint"]


@pytest.mark.parametrize("auth", ["token", "secret:ray-token"])
def test_token_auth_for_the_rayjobs_cluster_is_valid_for_the_crd_and_keeps_the_token_out(tmp_path, auth):
    out = tmp_path / "out"
    result = run_cli("generate", "--output-dir", str(out), "--scheduler", "kuberay", "--nnodes", "2",
                     "--k8s-ray-auth", auth, env={"RAY_AUTH_TOKEN": "ray-tok-kube-5151"})
    assert result.returncode == 0, result.stderr
    text = (out / "rayjob.yaml").read_text()
    assert "ray-tok-kube-5151" not in text and not (out / "ray_auth_token").exists()
    rayjob = list(yaml.safe_load_all(text))[1]
    validate(rayjob)
    cluster = rayjob["spec"]["rayClusterSpec"]
    pods = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    if auth == "token":  # KubeRay >= 1.5.1 makes the token and hands it to every pod and the submitter
        assert cluster["authOptions"] == {"mode": "token"} and "submitterPodTemplate" not in rayjob["spec"]
        assert not [e for p in pods for e in p["template"]["spec"]["containers"][0]["env"] if e["name"].startswith("RAY_AUTH")]
    else:  # older operators: the token from the Secret in every pod, the submitter included
        assert "authOptions" not in cluster
        submitter = rayjob["spec"]["submitterPodTemplate"]["spec"]["containers"][0]
        for env in [p["template"]["spec"]["containers"][0]["env"] for p in pods] + [submitter["env"]]:
            assert {"name": "RAY_AUTH_MODE", "value": "token"} in env
            assert {"name": "RAY_AUTH_TOKEN", "valueFrom": {"secretKeyRef": {"name": "ray-token", "key": "auth_token"}}} in env
        assert "command" not in submitter  # KubeRay fills in its `ray job submit`
        assert "kubectl create secret generic ray-token --from-file=auth_token=" in text


def test_a_bad_k8s_ray_auth_is_one_line(tmp_path):
    result = run_cli("generate", "--output-dir", str(tmp_path / "o"), "--scheduler", "kuberay", "--k8s-ray-auth", "yes")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "--k8s-ray-auth: 'yes' is not token, disabled or secret:NAME" in " ".join(result.stderr.split())


def test_a_field_the_crd_does_not_know_fails_the_validation():
    """The validation can fail: a misspelt field is refused, not pruned."""
    doc = {"apiVersion": "ray.io/v1", "kind": "RayJob", "metadata": {"name": "x"},
           "spec": {"entrypoint": "true", "backoffLimit": 0, "shutdownAfterJobsFinish": True}}
    with pytest.raises(jsonschema.ValidationError):
        validate(doc)
    with pytest.raises(jsonschema.ValidationError):
        validate({**doc, "spec": {"entrypoint": "true", "backoffLimit": "none"}})


@pytest.mark.parametrize("name", sorted(p.name for p in (FIXTURES / "kuberay").glob("rayjob-*.json")))
def test_the_replayed_kubectl_answers_are_valid_rayjobs(name):
    doc = json.loads((FIXTURES / "kuberay" / name).read_text().replace("{name}", "vd-x-a1"))
    doc["spec"] = {"entrypoint": "true"}
    validate(doc)


def test_bad_scheduler_flags_are_one_line_each(tmp_path):
    for flag, value, said in (("--k8s-volume", "models", "CLAIM:/MOUNT/PATH"), ("--namespace", "RL_team", "Kubernetes name"),
                              ("--k8s-resource", "gpu", "extended resource")):
        result = run_cli("generate", "--output-dir", str(tmp_path / "o"), "--scheduler", "kuberay", flag, value)
        assert result.returncode == 1 and said in " ".join(result.stderr.split()) and "Traceback" not in result.stderr
        assert not (tmp_path / "o").exists()


# -- the backend against the fake kubectl ------------------------------------------------------------

@pytest.fixture()
def kube_host(npu_host):
    tmp = npu_host["tmp"]
    verl = tmp / "verl"
    (verl / "recipe" / "dapo").mkdir(parents=True)
    shutil.copy(STANDIN, verl / "recipe" / "dapo" / "main_dapo.py")
    state = tmp / "kube"
    env = dict(npu_host["env"], STANDIN_STEP_SECONDS="0.1", FAKE_KUBE_DIR=str(state),
               PATH=f"{FAKE_KUBECTL}:{npu_host['env']['PATH']}")
    args = ["--yes", "--backend", "kuberay", "--run-dir", str(verl), "--ckpts-dir", str(tmp / "ckpts"),
            "--train-steps", "6", "--save-freq", "2", "--model-path", str(npu_host["root"] / "models" / "Qwen3-8B")]
    yield {"env": env, "args": args, "state": state}
    for pid_file in state.glob("*.pid"):  # drivers the fake started and a test left running
        try:
            os.killpg(int(pid_file.read_text()), 9)
        except (ProcessLookupError, ValueError):
            pass


def launch(host, *extra, env=None):
    full = {**os.environ, **host["env"], **(env or {}), "COLUMNS": "200"}
    return subprocess.run([*VERL_BIN, "launch", *host["args"], *extra], capture_output=True, text=True, env=full,
                          timeout=240)


def calls(host) -> list[list[str]]:
    path = host["state"] / "calls.log"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def test_a_rayjob_is_applied_followed_and_succeeds_with_the_key_from_a_secret(kube_host):
    result = launch(kube_host, "--follow", "--json", "--swanlab", "yes", "--swanlab-host", "http://127.0.0.1:9",
                    env={"SWANLAB_API_KEY": "sk-kube-secret-77"})
    final = json.loads(result.stdout)
    assert result.returncode == 0 and final["state"] == "succeeded", result.stderr[-3000:]
    assert final["backend"] == "kuberay" and final["step"] == 6
    assert final["scheduler"]["state"] == "Complete" and final["scheduler"]["job_status"] == "SUCCEEDED"
    name = f"vd-{final['id']}-a1"
    made = calls(kube_host)
    assert ["apply", "-f", "-"] in made  # the Secret, on standard input
    assert ["apply", "-f", str(Path(final["log"]).parent / "scripts" / "rayjob.yaml")] in made
    assert not any("sk-kube-secret-77" in " ".join(c) for c in made)
    secret = json.loads((kube_host["state"] / "secret-verl-deploy-swanlab.json").read_text())
    assert secret["stringData"]["api-key"] == "sk-kube-secret-77"
    assert "sk-kube-secret-77" not in (Path(final["log"]).parent / "scripts" / "rayjob.yaml").read_text()
    log = Path(final["log"]).read_text()
    assert f"rayjob {name}: Initializing" in log and f"rayjob {name}: Running, job RUNNING" in log
    assert "Total training steps: 6" in log and f"rayjob {name}: Complete, job SUCCEEDED" in log


def test_a_device_oom_recreates_the_rayjob_with_the_next_feature_and_resumes(kube_host):
    result = launch(kube_host, "--follow", "--json", env={"STANDIN_FAIL": "device_oom", "STANDIN_FAIL_STEP": "3"})
    final = json.loads(result.stdout)
    assert final["state"] == "succeeded", result.stderr[-3000:]
    attempts = final["attempts"]
    assert [a["features"] for a in attempts] == [[], ["offload"], ["recompute"]]
    assert attempts[1]["resumed_from_step"] == 2 and attempts[2]["resumed_from_step"] == 4
    applied = [c[2] for c in calls(kube_host) if c[:2] == ["apply", "-f"] and c[2] != "-"]
    assert [Path(p).parents[1].name for p in applied] == ["attempt-1", "attempt-2", "attempt-3"]
    second = yaml.safe_load_all(Path(applied[1]).read_text())
    configmap = next(second)
    assert "PARAM_OFFLOAD=True" in configmap["data"]["run_training.sh"]
    assert "Setting global step to 2" in Path(attempts[1]["log"]).read_text()
    # the trainer exited on the OOM by itself: its RayJob failed with its own exit code (KubeRay shuts its
    # cluster down, shutdownAfterJobFinishes); a RayJob still running is deleted before the next one
    first = f"vd-{final['id']}-a1"
    deleted = ["delete", "rayjob", first, "--ignore-not-found", "--wait=false"] in calls(kube_host)
    assert attempts[0]["exit_code"] not in (None, 0) or deleted, attempts[0]


def test_stop_deletes_the_rayjob(kube_host):
    result = launch(kube_host, "--json", env={"STANDIN_FAIL": "hang"})
    run = json.loads(result.stdout)
    deadline = time.monotonic() + 60
    while json.loads(run_cli("status", run["id"], "--json", env=kube_host["env"]).stdout)["step"] < 1:
        assert time.monotonic() < deadline
        time.sleep(0.3)
    assert run_cli("stop", run["id"], env=kube_host["env"]).returncode == 0
    assert ["delete", "rayjob", f"vd-{run['id']}-a1", "--ignore-not-found", "--wait=false"] in calls(kube_host)
    assert json.loads(run_cli("status", run["id"], "--json", env=kube_host["env"]).stdout)["state"] == "stopped"


def test_a_rayjob_that_kuberay_fails_to_submit_ends_the_run_with_its_reason(kube_host):
    result = launch(kube_host, "--follow", "--json", env={"FAKE_KUBE_SCENARIO": "submission_failed"})
    final = json.loads(result.stdout)
    assert result.returncode == 1 and final["state"] == "failed"
    assert final["failure"]["class"] == "scheduler" and "SubmissionFailed" in final["failure"]["cause"]
    assert len(final["attempts"]) == 1


def test_without_kuberay_in_the_cluster_nothing_is_applied(kube_host):
    result = launch(kube_host, env={"FAKE_KUBE_NO_CRD": "1"})
    assert result.returncode == 1 and "rayjobs.ray.io" in result.stderr and "Traceback" not in result.stderr
    assert not [c for c in calls(kube_host) if c[:1] == ["apply"]]
