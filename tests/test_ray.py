"""`launch --backend ray`: Ray Jobs on a real Ray head started here, with 8 NPU as a custom resource.

No accelerator is needed: verl asks Ray for {"NPU": 1} bundles and the stand-in trainer asks for
nothing, so a head started with --resources '{"NPU": 8}' stands for an Ascend node. Only the
cluster this module starts is stopped at the end (by its own temp dir, not a global `ray stop`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import ENV_BIN, VERL_BIN, env_tool, run_cli, skip_module_without
from rayports import free_port, kill_processes_naming, node_ports

skip_module_without("ray")
STANDIN = Path(__file__).parent / "standin_trainer.py"
# the `ray` console script the README's test command installed beside this interpreter (never a base one)
RAY_BIN = env_tool("ray") or str(ENV_BIN / "ray")




# No Ray here sees the user's ~/.ray/auth_token (which would turn token auth on): a HOME of the tests' own.
PRIVATE_HOME = tempfile.mkdtemp(prefix="vd-ray-home-")
AUTH_VARIABLES = ("RAY_AUTH_MODE", "RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH")


def without_ray_auth(env: dict) -> dict:
    """`env` with none of Ray's token variables: each test sets the mode it tests."""
    return {k: v for k, v in env.items() if k not in AUTH_VARIABLES}


def ray_env(mode: str = "disabled", token_path: Path | None = None) -> dict:
    """The environment of a `ray start` here: its auth mode explicit, a private HOME, the token (if any) in a file."""
    env = {**without_ray_auth(dict(os.environ)), "RAY_USAGE_STATS_ENABLED": "0", "HOME": PRIVATE_HOME,
           "RAY_AUTH_MODE": mode, "PATH": f"{Path(sys.executable).parent}:{Path(RAY_BIN).parent}:{os.environ['PATH']}"}
    if token_path is not None:
        env["RAY_AUTH_TOKEN_PATH"] = str(token_path)
    return env


def write_token(path: Path, token: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as handle:
        handle.write(token + "\n")
    return path


def stop_cluster(temp_dir: str) -> None:
    """Kill the Ray processes of one cluster (found by its temp dir), leaving any other Ray alone."""
    kill_processes_naming(temp_dir)
    shutil.rmtree(temp_dir, ignore_errors=True)


def start_head(mode: str = "disabled", token: str | None = None, tries: int = 3) -> dict:
    """A Ray head with 8 NPU and a job server, in auth `mode` (token: the token in a 0600 file it is pointed at).

    `ray start` waits a fixed 30 s for its raylet (ray/_private/node.py); on a machine loaded by the rest of the
    suite that wait can run out, so a head that timed out is stopped and started again (as start_verl.sh does)."""
    import secrets as random_secrets

    token = token or (random_secrets.token_hex(16) if mode == "token" else None)
    for attempt in range(1, tries + 1):
        temp_dir = tempfile.mkdtemp(prefix="vdr-", dir="/tmp")  # short: Ray's unix sockets live here
        token_path = write_token(Path(temp_dir) / "cluster-token", token) if token else None
        gcs, dashboard = free_port(), free_port()
        started = subprocess.run([RAY_BIN, "start", "--head", f"--port={gcs}", f"--dashboard-port={dashboard}",
                                  "--dashboard-host=127.0.0.1", "--num-cpus=2", "--resources", '{"NPU": 8}',
                                  f"--temp-dir={temp_dir}", *node_ports(head=True), "--disable-usage-stats"],
                                 capture_output=True, text=True, env=ray_env(mode, token_path), timeout=180)
        if started.returncode == 0 or attempt == tries or "timed out during startup" not in started.stderr:
            break
        stop_cluster(temp_dir)
    assert started.returncode == 0, started.stderr[-2000:]
    address = f"http://127.0.0.1:{dashboard}"
    from ray.job_submission import JobSubmissionClient

    headers = {"Authorization": f"Bearer {token}"} if token else None
    deadline = time.monotonic() + 60
    while True:
        try:
            JobSubmissionClient(address, headers=headers).list_jobs()
            break
        except Exception:
            assert time.monotonic() < deadline, "the job server did not come up"
            time.sleep(0.5)
    return {"address": address, "client": JobSubmissionClient(address, headers=headers), "mode": mode,
            "token": token, "temp_dir": temp_dir, "gcs": f"127.0.0.1:{gcs}"}


@pytest.fixture(scope="module")
def cluster():
    head = start_head("disabled")
    yield head
    stop_cluster(head["temp_dir"])


@pytest.fixture(scope="module", params=["token", "disabled"])
def auth_cluster(request):
    """The same head with Ray's token authentication on, and again with it off."""
    head = start_head(request.param)
    yield head
    stop_cluster(head["temp_dir"])


def make_job_host(npu_host, cluster) -> dict:
    verl = npu_host["tmp"] / "verl"
    (verl / "recipe" / "dapo").mkdir(parents=True)
    shutil.copy(STANDIN, verl / "recipe" / "dapo" / "main_dapo.py")
    env = dict(npu_host["env"], STANDIN_STEP_SECONDS="0.1", PATH=f"{Path(sys.executable).parent}:{npu_host['env']['PATH']}")
    args = ["--yes", "--backend", "ray", "--ray-address", cluster["address"], "--run-dir", str(verl),
            "--ckpts-dir", str(npu_host["tmp"] / "ckpts"), "--train-steps", "6", "--save-freq", "2",
            "--model-path", str(npu_host["root"] / "models" / "Qwen3-8B"),
            "--job-env", "STANDIN_STEP_SECONDS", "--job-env", "STANDIN_FAIL", "--job-env", "STANDIN_RAY"]
    return {"env": env, "args": args, "cluster": cluster}


@pytest.fixture()
def job_host(npu_host, cluster):
    return make_job_host(npu_host, cluster)


def launch(job_host, *extra, env=None):
    full = {**without_ray_auth(dict(os.environ)), **job_host["env"], **(env or {}), "COLUMNS": "200"}
    return subprocess.run([*VERL_BIN, "launch", *job_host["args"], *extra], capture_output=True, text=True,
                          env=full, timeout=300)


def test_a_run_is_submitted_as_a_ray_job_and_followed_to_the_end(job_host):
    result = launch(job_host, "--follow", "--json")
    final = json.loads(result.stdout)
    assert result.returncode == 0 and final["state"] == "succeeded", result.stderr[-3000:]
    assert final["backend"] == "ray" and final["step"] == 6
    jobs = {j.submission_id: j for j in job_host["cluster"]["client"].list_jobs()}
    job = jobs[f"verl-deploy-{final['id']}-attempt-1"]
    assert job.status == "SUCCEEDED" and job.entrypoint == "bash run_training.sh"
    assert "ASCEND_RT_VISIBLE_DEVICES" in job.runtime_env["env_vars"]
    assert "Training Progress" in Path(final["log"]).read_text()


def test_launch_prints_none_of_rays_own_info_lines(job_host):
    result = launch(job_host, "--follow")  # for people: the confirmation, events, the end; Ray's logging is not ours
    assert result.returncode == 0, result.stderr[-3000:]
    leaked = [line for line in (result.stdout + result.stderr).splitlines() if re.search(r"\bINFO\b \S+\.py:\d+ --", line)]
    assert leaked == [] and "succeeded at step 6/6" in result.stdout


def test_evidence_of_a_ray_job_holds_the_job_servers_record_and_says_where_the_stacks_are(job_host):
    run = json.loads(launch(job_host, "--json", env={"STANDIN_STEP_SECONDS": "2"}).stdout)
    result = run_cli("evidence", run["id"], "--json", env=job_host["env"])
    evidence = json.loads(result.stdout)
    job = json.loads((Path(evidence["folder"]) / "ray-job.json").read_text())
    assert job["submission_id"] == f"verl-deploy-{run['id']}-attempt-1" and job["status"] in ("RUNNING", "PENDING")
    assert any("dashboard" in problem for problem in evidence["problems"]) and evidence["stacks"] == []
    assert run_cli("stop", run["id"], env=job_host["env"]).returncode == 0


def test_a_device_oom_resubmits_with_offload_and_resumes(job_host):
    result = launch(job_host, "--follow", "--json", env={"STANDIN_FAIL": "device_oom"})
    final = json.loads(result.stdout)
    assert final["state"] == "succeeded", result.stderr[-3000:]
    assert [a["features"] for a in final["attempts"]] == [[], ["offload"], ["recompute"]]
    assert final["attempts"][1]["resumed_from_step"] == 2
    statuses = {j.submission_id: j.status for j in job_host["cluster"]["client"].list_jobs()}
    assert statuses[f"verl-deploy-{final['id']}-attempt-1"] in ("STOPPED", "FAILED")
    assert statuses[f"verl-deploy-{final['id']}-attempt-3"] == "SUCCEEDED"


def trainings(client) -> list[str]:
    """The training jobs this tool submitted (verify's read-only job, which every launch gate runs, is not one)."""
    return [j.submission_id for j in client.list_jobs() if (j.submission_id or "").startswith("verl-deploy-")]


def test_more_devices_than_the_cluster_has_are_refused_before_submitting(job_host):
    before = trainings(job_host["cluster"]["client"])
    result = launch(job_host, "--devices", "0-15")
    assert result.returncode == 1
    assert "needs 1 node(s) x 16 NPU = 16; the cluster has 1 node(s), 8 NPU" in " ".join(result.stderr.split())
    result = launch(job_host, "--nnodes", "2")
    assert result.returncode == 1 and "needs 2 node(s) x 8 NPU" in " ".join(result.stderr.split())
    assert trainings(job_host["cluster"]["client"]) == before


def test_a_gpu_run_on_an_npu_cluster_names_the_resource(job_host):
    result = launch(job_host, "--device", "gpu", "--framework", "fsdp")
    assert result.returncode == 1 and "registers NPU, not GPU" in " ".join(result.stderr.split())


def test_stop_stops_the_job_and_the_key_never_goes_into_the_job(job_host):
    refused = launch(job_host, "--job-env", "SWANLAB_API_KEY=sk-x")
    assert refused.returncode == 1 and "must not go into the job" in refused.stderr
    refused = launch(job_host, "--job-env", "RAY_AUTH_TOKEN=tok-x")
    assert refused.returncode == 1 and "RAY_AUTH_TOKEN must not go into the job" in refused.stderr
    result = launch(job_host, "--json", "--swanlab", "yes", "--swanlab-host", "http://127.0.0.1:9",
                    env={"STANDIN_FAIL": "hang", "SWANLAB_API_KEY": "sk-secret-ray-77"})
    run = json.loads(result.stdout)
    submission = f"verl-deploy-{run['id']}-attempt-1"
    job = next(j for j in job_host["cluster"]["client"].list_jobs() if j.submission_id == submission)
    assert "sk-secret-ray-77" not in json.dumps(job.runtime_env)
    assert job.runtime_env["env_vars"]["SWANLAB_API_HOST"] == "http://127.0.0.1:9/api"  # what swanlab reads
    assert run_cli("stop", run["id"], env=job_host["env"]).returncode == 0
    deadline = time.monotonic() + 60
    while job_host["cluster"]["client"].get_job_status(submission) not in ("STOPPED", "FAILED"):
        assert time.monotonic() < deadline
        time.sleep(0.5)
    assert json.loads(run_cli("status", run["id"], "--json", env=job_host["env"]).stdout)["state"] == "stopped"


# -- Ray's token authentication: the same runs with it on and off ------------------------------------------

def proc_cmdlines() -> str:
    """Every process's command line on this host that we may read (the token must be on none)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                found.append((entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace"))
            except OSError:
                continue
    return "\n".join(found)


def files_holding(root: Path, secret: str) -> list[str]:
    return [str(p) for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


@pytest.fixture()
def auth_host(npu_host, auth_cluster):
    """verl-deploy on a host whose user has the cluster's token where Ray looks by default (~/.ray/auth_token of
    the host's private HOME), RAY_AUTH_MODE unset: the client asks the cluster whether it wants a token."""
    host = make_job_host(npu_host, auth_cluster)
    host["env"] = {k: v for k, v in host["env"].items() if k not in AUTH_VARIABLES}
    if auth_cluster["token"]:
        write_token(Path(host["env"]["HOME"]) / ".ray" / "auth_token", auth_cluster["token"])
    host["env"]["STANDIN_RAY"] = "1"  # the job's driver connects to the cluster as verl's does
    return host


def cli(host: dict, *args: str, env: dict | None = None, outputs: list | None = None):
    full = {**without_ray_auth(dict(os.environ)), **host["env"], **(env or {}), "COLUMNS": "200"}
    result = subprocess.run([*VERL_BIN, *args], capture_output=True, text=True, env=full, timeout=300)
    if outputs is not None:
        outputs.append(result.stdout + result.stderr)
    return result


def test_ray_jobs_run_recover_and_stop_with_token_auth_on_and_off_and_the_token_is_nowhere(auth_host):
    cluster, outputs = auth_host["cluster"], []
    state = Path(auth_host["env"]["VERL_DEPLOY_STATE_DIR"])
    result = cli(auth_host, "launch", *auth_host["args"], "--follow", "--json", env={"STANDIN_FAIL": "device_oom"},
                 outputs=outputs)
    final = json.loads(result.stdout)
    assert final["state"] == "succeeded", result.stderr[-3000:]
    assert [a["features"] for a in final["attempts"]] == [[], ["offload"], ["recompute"]]  # through OOM retries
    log = Path(final["log"]).read_text()
    assert "connected to the Ray cluster: 2 CPU" in log and "Training Progress" in log
    status = json.loads(cli(auth_host, "status", final["id"], "--json", outputs=outputs).stdout)
    assert status["state"] == "succeeded" and status["step"] == 6
    logs = cli(auth_host, "logs", final["id"], outputs=outputs)
    assert logs.returncode == 0 and "step:6 - " in logs.stdout

    # its own checkpoint folder: in the first run's, it would resume at its finished step 6 and succeed at once
    fresh = [str(state.parent / "ckpts-hanging") if a.endswith("/ckpts") else a for a in auth_host["args"]]
    hanging = json.loads(cli(auth_host, "launch", *fresh, "--json", env={"STANDIN_FAIL": "hang"},
                             outputs=outputs).stdout)
    evidence = json.loads(cli(auth_host, "evidence", hanging["id"], "--json", outputs=outputs).stdout)
    job = json.loads((Path(evidence["folder"]) / "ray-job.json").read_text())  # asked with the token
    assert job["submission_id"] == f"verl-deploy-{hanging['id']}-attempt-1", evidence["problems"]
    cmdlines = proc_cmdlines()  # the pump, the supervisor, the job's driver, Ray's own processes: all alive now
    if cluster["token"]:
        refused = cli(auth_host, "stop", hanging["id"], env={"HOME": str(state)}, outputs=outputs)  # a HOME with no token
        assert refused.returncode == 1 and "Traceback" not in refused.stderr
        assert "was not stopped (it goes on)" in refused.stderr and "RAY_AUTH_TOKEN" in refused.stderr
        assert json.loads(cli(auth_host, "status", hanging["id"], "--json").stdout)["state"] == "running"
    stopped = cli(auth_host, "stop", hanging["id"], outputs=outputs)
    assert stopped.returncode == 0, stopped.stderr
    submission = f"verl-deploy-{hanging['id']}-attempt-1"
    deadline = time.monotonic() + 60
    # ended: a driver that called ray.init() exits 0 on Ray's SIGTERM, which Ray 2.60 records as SUCCEEDED
    while cluster["client"].get_job_status(submission) not in ("STOPPED", "FAILED", "SUCCEEDED"):
        assert time.monotonic() < deadline, cluster["client"].get_job_status(submission)
        time.sleep(0.5)
    assert json.loads(cli(auth_host, "status", hanging["id"], "--json").stdout)["state"] == "stopped"
    if cluster["token"]:
        secret = cluster["token"]
        assert secret not in cmdlines and secret not in proc_cmdlines()
        assert not [o for o in outputs if secret in o]
        assert files_holding(state, secret) == []  # records, logs, scripts, plan.json, evidence
        runtime = {j.submission_id: j.runtime_env for j in cluster["client"].list_jobs()}[submission]
        assert secret not in json.dumps(runtime)


def test_a_cluster_that_wants_a_token_the_client_lacks_is_one_line_with_the_fix(npu_host):
    head = start_head("token")
    try:
        host = make_job_host(npu_host, head)
        host["env"] = {k: v for k, v in host["env"].items() if k not in AUTH_VARIABLES}
        before = len(head["client"].list_jobs())
        cases = {  # what the client has -> what the line says
            "nothing": ({}, "uses token authentication but no Ray token was found here"),
            "a wrong token": ({"RAY_AUTH_TOKEN": "not-this-clusters-token"}, "rejects the Ray token from RAY_AUTH_TOKEN"),
            "auth off here": ({"RAY_AUTH_MODE": "disabled"}, "wants a Ray token and none was sent (RAY_AUTH_MODE=disabled here)"),
            "a missing token file": ({"RAY_AUTH_TOKEN_PATH": str(npu_host["tmp"] / "no-such-token")},
                                     "RAY_AUTH_TOKEN_PATH is set but"),
        }
        for name, (env, said) in cases.items():
            result = cli(host, "launch", *host["args"], env=env)
            # a refused launch lists every blocker (#33): here the cluster's refusal is the one error
            lines = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
            # the numbers this test chose are not the status: pytest's folder can be pytest-401, a port 54017
            said_here = result.stderr.replace(str(npu_host["tmp"]), "TMP").replace(head["address"], "ADDRESS")
            assert result.returncode == 1 and "Traceback" not in said_here and "401" not in said_here, name
            assert len(lines) == 1 and lines[0].startswith(("error: ray_address: ", "error: ray_auth: ")) and said in lines[0], (name, lines)
            assert "RAY_AUTH_TOKEN" in lines[0] and "not-this-clusters-token" not in result.stderr
        assert len(head["client"].list_jobs()) == before  # nothing was submitted
    finally:
        stop_cluster(head["temp_dir"])
