"""Refusals found by an adversarial pass: each is one `error: FIELD: what — fix: how` line, a non-zero
exit, no traceback and nothing written; secrets in a refused value are never echoed."""

from __future__ import annotations

import pytest
from conftest import run_cli


def isolated(tmp_path) -> dict:
    """State and config of the CLI under tmp_path (so `nothing written` can be checked); the verl config
    cache stays shared (a fresh one would download verl's wheel)."""
    return {"VERL_DEPLOY_STATE_DIR": str(tmp_path / "state"), "VERL_DEPLOY_CONFIG_DIR": str(tmp_path / "config")}


def written(tmp_path) -> list:
    return [p for p in tmp_path.rglob("*") if p.is_file()]


def refusal(result, field: str) -> str:
    """The single error line of a refused command (asserts the shape every refusal has)."""
    text = result.stdout + result.stderr
    assert result.returncode != 0, text[-2000:]
    assert "Traceback" not in text, text[-2000:]
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"error: {field}:") and " fix: " in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("url, secrets", [
    ("http://user:PASSWORD9@10.0.0.5:9/h", ["PASSWORD9", "user"]),
    ("slak://T1/B1/SECRETTOKEN123", ["SECRETTOKEN123", "B1"]),
    ("user:PASSWORD9@10.0.0.5", ["PASSWORD9"]),
])
def test_a_refused_notify_url_never_echoes_its_credentials(tmp_path, url, secrets):
    env = isolated(tmp_path)
    for extra in ([], ["--json"]):
        result = run_cli("launch", "--notify", url, *extra, env=env)
        out = result.stdout + result.stderr
        if not extra:
            line = refusal(result, "notify")
            assert "--notify" in line
        else:
            assert result.returncode != 0 and "Traceback" not in out
        for secret in secrets:
            assert secret not in out, out
    assert not [p for p in (tmp_path / "state").rglob("*") if p.is_file()]  # no run record


@pytest.mark.parametrize("text, field", [("train_steps: yes", "train_steps"), ("lr: on", "lr"),
                                         ("device_memory_gb: true", "device_memory_gb")])
def test_a_yaml_yes_no_is_not_read_as_a_number(tmp_path, text, field):
    """YAML's `yes` is a bool, and pydantic would read it as 1: a one-step training."""
    config = tmp_path / "run.yaml"
    config.write_text(text + "\n")
    result = run_cli("plan", "--config", str(config), "--ignore-detected", env=isolated(tmp_path))
    line = refusal(result, field)
    assert "yes/no" in line and "number" in line and "run.yaml" in line
    assert not [p for p in (tmp_path / "state").rglob("*") if p.is_file()]


@pytest.mark.parametrize("flag, value", [("--experiment-name", "a/../../b"), ("--experiment-name", ".."),
                                         ("--experiment-name", ".hidden"), ("--project-name", "team/x")])
def test_run_names_that_become_directories_stay_inside_the_checkpoint_root(tmp_path, flag, value):
    """verl saves to checkpoints/PROJECT/EXPERIMENT: `a/../../b` would land outside that root."""
    field = flag.removeprefix("--").replace("-", "_")
    line = refusal(run_cli("plan", "--ignore-detected", flag, value, env=isolated(tmp_path)), field)
    assert "directory name" in line and flag in line
    assert not [p for p in (tmp_path / "state").rglob("*") if p.is_file()]


def test_a_dotted_experiment_name_is_still_accepted(tmp_path):
    import json

    result = run_cli("plan", "--ignore-detected", "--json", "--experiment-name", "qwen2.5-7b.v2", env=isolated(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout)["spec"]["experiment_name"] == "qwen2.5-7b.v2"


SCHEDULER_REFUSALS = [
    (["kuberay", "--k8s-volume", "m:/mnt", "--k8s-volume", "m2:/mnt/"], "k8s-volume", "own mount path"),
    (["kuberay", "--k8s-volume", "m:/dev/shm"], "k8s-volume", "another path"),
    (["kuberay", "--k8s-volume", "m:/mnt:rx"], "k8s-volume", "CLAIM:/PATH:ro"),
    (["slurm", "--sbatch-option", "--nodes=4"], "sbatch-option", "--nnodes"),
    (["slurm", "--sbatch-option=--part=debug"], "sbatch-option", "use --partition"),  # sbatch takes a prefix
    (["slurm", "--sbatch-option=--n=4"], "sbatch-option", "remove it"),  # ambiguous to sbatch: --nodes, --ntasks
    (["slurm", "--sbatch-option=--gres=gpu:2"], "sbatch-option", "--gres-name"),
    (["slurm", "--sbatch-option=--ntasks=2"], "sbatch-option", "one task per node"),
    (["slurm", "--sbatch-option=--time=1:00:00"], "sbatch-option", "use --time"),
    (["slurm", "--sbatch-option=--error=e.txt"], "sbatch-option", "diagnose"),
    (["slurm", "--sbatch-option=-N4"], "sbatch-option", "long form"),
    (["slurm", "--gres-name", "gpu:8"], "gres-name", "--gres-name gpu "),
]


@pytest.mark.parametrize("args, field, fix", SCHEDULER_REFUSALS)
def test_a_scheduler_file_the_cluster_would_reject_is_not_written(tmp_path, args, field, fix):
    out = tmp_path / "out"
    result = run_cli("generate", "--ignore-detected", "--output-dir", str(out), "--scheduler", *args,
                     env=isolated(tmp_path))
    line = refusal(result, field)
    assert fix in line.split(" fix: ", 1)[1], line
    assert not out.exists() or not any(out.iterdir())


def test_a_read_only_volume_is_mounted_read_only_and_the_crd_accepts_it(tmp_path):
    import yaml
    from test_kuberay import validate

    out = tmp_path / "out"
    result = run_cli("generate", "--ignore-detected", "--output-dir", str(out), "--scheduler", "kuberay",
                     "--k8s-volume", "models:/mnt/models:ro", "--k8s-volume", "ckpt:/mnt/ckpt", env=isolated(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    rayjob = list(yaml.safe_load_all((out / "rayjob.yaml").read_text()))[1]
    validate(rayjob)
    mounts = rayjob["spec"]["rayClusterSpec"]["headGroupSpec"]["template"]["spec"]["containers"][0]["volumeMounts"]
    assert {"name": "data-0", "mountPath": "/mnt/models", "readOnly": True} in mounts
    assert {"name": "data-1", "mountPath": "/mnt/ckpt"} in mounts
    assert len({m["mountPath"] for m in mounts}) == len(mounts)


def test_a_gres_type_is_kept_and_an_extra_sbatch_option_is_added_once(tmp_path):
    out = tmp_path / "out"
    result = run_cli("generate", "--ignore-detected", "--output-dir", str(out), "--scheduler", "slurm", "--device", "gpu",
                     "--gres-name", "gpu:a100", "--sbatch-option=--qos=high", env=isolated(tmp_path))
    assert result.returncode == 0, result.stderr[-2000:]
    lines = [line for line in (out / "submit.sbatch").read_text().splitlines() if line.startswith("#SBATCH")]
    assert "#SBATCH --gres=gpu:a100:8" in lines and "#SBATCH --qos=high" in lines
    names = [line.split()[1].split("=")[0] for line in lines]
    assert len(names) == len(set(names)), lines


def recording_docker(tmp_path) -> dict:
    """A `docker` on PATH that only logs its calls and fails (saying, as docker does, that no container
    of that name exists): a refusal must come before any of them, or at least before run and pull."""
    import os

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text(f"#!/bin/sh\necho \"$@\" >> {tmp_path}/docker.calls\n"
                                    "echo 'Error: No such object: x' >&2\nexit 1\n")
    (bin_dir / "docker").chmod(0o755)
    return {"PATH": f"{bin_dir}:{os.environ['PATH']}"}


@pytest.mark.parametrize("mounts, words", [
    (["--mount", "/tmp:/y:ro", "--mount", "/tmp:/y"], ["/y", "duplicate"]),
    (["--mount", "/tmp:/y/", "--mount", "/tmp:/y/."], ["/y", "duplicate"]),
    (["--mount", "/tmp:/"], ["'/tmp:/'", "destination"]),
    (["--mount", "/tmp:y"], ["absolute"]),
])
def test_container_mounts_docker_would_refuse_are_refused_before_any_docker_call(tmp_path, mounts, words):
    env = {**isolated(tmp_path), **recording_docker(tmp_path)}
    result = run_cli("container", "create", "-y", "--device", "gpu", "--ignore-detected", *mounts, "img:1", "nn", env=env)
    line = refusal(result, "mounts")
    assert all(word in line for word in words) and "--mount" in line, line
    assert not (tmp_path / "docker.calls").exists()  # docker was never called


def test_a_user_mount_at_an_automatic_mount_path_replaces_it():
    """The model directory is mounted at its own path; a --mount there too would be a duplicate mount point."""
    import tempfile

    from verl_deploy.backends.container_setup import run_argv
    from verl_deploy.spec import RunSpec

    with tempfile.TemporaryDirectory() as model:
        spec = RunSpec(device="gpu", model_path=model, mounts=[f"/tmp:{model}:ro"])
        argv = run_argv(spec, "nn", "img:1", devices=[])
    targets = [argv[i + 1].split(":")[1] for i, word in enumerate(argv) if word == "-v"]
    assert targets == [model] and f"/tmp:{model}:ro" in argv


@pytest.mark.parametrize("args, assumed, known", [
    (["--device", "gpu", "--device-name", "Tesla-T4"], 80.0, "H100"),
    (["--device-name", "bogus"], 64.0, "910B1/2/3"),
])
def test_an_unknown_device_name_warns_which_memory_was_assumed(tmp_path, args, assumed, known):
    """Not refused (new devices appear), but never a silent 80 GB: the warning names the known ones and the fix."""
    import json

    env = isolated(tmp_path)
    human = run_cli("plan", "--ignore-detected", *args, env=env)
    assert human.returncode == 0, human.stderr[-2000:]
    line = next(line for line in (human.stdout + human.stderr).splitlines() if line.startswith("warning: device_name:"))
    assert f"assumed {assumed:g} GB" in line and known in line and "fix: pass --device-memory-gb N" in line
    document = json.loads(run_cli("plan", "--ignore-detected", "--json", *args, env=env).stdout)
    assert document["memory"]["device_gb"] == assumed
    sized = json.loads(run_cli("plan", "--ignore-detected", "--json", *args, "--device-memory-gb", "16", env=env).stdout)
    assert sized["memory"]["device_gb"] == 16.0 and not [f for f in sized["findings"] if f["field"] == "device_name"]


def test_an_l40s_is_estimated_with_its_48_gb():
    import json

    result = run_cli("plan", "--ignore-detected", "--json", "--device", "gpu", "--device-name", "NVIDIA L40S")
    document = json.loads(result.stdout)
    assert document["memory"]["device_gb"] == 48.0
    assert not [f for f in document["findings"] if f["field"] == "device_name"]


def test_a_mount_onto_a_driver_path_the_container_gets_is_refused_before_docker_runs(tmp_path):
    """On Ascend the host's npu-smi is bound at its own path; a --mount there too is a duplicate mount point."""
    driver = tmp_path / "driver"
    (driver / "usr/local/bin").mkdir(parents=True)
    (driver / "usr/local/bin/npu-smi").write_text("#!/bin/sh\n")
    env = {**isolated(tmp_path), **recording_docker(tmp_path), "VERL_DEPLOY_DRIVER_ROOT": str(driver)}
    result = run_cli("container", "create", "-y", "--ignore-detected", "--mount", "/tmp:/usr/local/bin/npu-smi",
                     "img:1", "nn", env=env)
    line = refusal(result, "container")
    assert "/usr/local/bin/npu-smi" in line and "another container path" in line
    calls = (tmp_path / "docker.calls").read_text().splitlines()
    assert calls == ["container inspect -- nn"], calls  # only the look-up whether nn exists: no pull, no run


def test_a_delivery_error_is_kept_without_the_urls_secrets():
    """What apprise logs on a failed delivery goes into the run record and `status`: scrubbed first."""
    from verl_deploy.runs.notify import scrub, target

    url = "json://user:PASSWORD9@10.0.0.5:9/hook/SECRETTOKEN123?token=Q1W2E3"
    said = f"Failed to send to {url}: 401 for user:PASSWORD9 at /hook/SECRETTOKEN123 token=Q1W2E3"
    kept = scrub(said, url)
    assert not any(secret in kept for secret in ("PASSWORD9", "SECRETTOKEN123", "Q1W2E3")), kept
    assert target(url) in kept and target(url) == "json://10.0.0.5:9"
