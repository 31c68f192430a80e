"""`verl-deploy check` end to end: fakes only for npu-smi / nvidia-smi / docker / ray (real output formats);
real parquet files, real model directories, real interfaces (psutil), real sockets, real timeouts."""

from __future__ import annotations

import http.server
import json
import shutil
import socket
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import FAKES, HW, TINY_MODEL, make_model, run_cli

def check(host, *args, extra_env=None):
    env = dict(host["env"], **(extra_env or {}))
    return run_cli("check", "--search-root", str(host["root"]), *args, env=env)


def check_json(host, *args, extra_env=None):
    result = check(host, "--json", *args, extra_env=extra_env)
    assert result.stdout, result.stderr
    return result, json.loads(result.stdout)


def rows(data, area):
    return {row["check"]: row for row in data["areas"][area]["rows"]}


def test_healthy_npu_host_detects_devices_model_data_and_saves_them(npu_host):
    result, data = check_json(npu_host)
    assert result.returncode == 0, data["findings"]
    accel = data["accelerators"]
    assert accel["kind"] == "npu" and len(accel["devices"]) == 8
    assert accel["devices"][3] == {"id": 3, "npu": 3, "chip": 0, "name": "910B3", "health": "OK", "hbm_used_mb": 3439,
                                   "hbm_total_mb": 65536, "busy": False, "processes": [], "bus_id": "0000:82:00.0"}
    detected = data["detected"]
    assert detected["model_path"] == str(npu_host["root"] / "models" / "Qwen3-8B")
    assert detected["train_file"].endswith("dapo-math-17k.parquet") and detected["test_file"].endswith("aime-2024.parquet")
    assert detected["devices"] == list(range(8)) and detected["device"] == "npu"
    assert rows(data, "models")["config.json"]["value"].startswith("Qwen3ForCausalLM, 2 layers")
    assert "512 rows" in rows(data, "datasets")["train file"]["value"]
    assert rows(data, "ascend")["CANN"]["value"].startswith("8.3.RC1")
    assert "verl-npu (running" in rows(data, "docker")["containers"]["value"]
    assert data["verdict"].startswith("ready: 8 NPUs free")
    # plan and generate on this host now start from what was found
    plan = json.loads(run_cli("plan", "--json", env=npu_host["env"]).stdout)
    assert plan["spec"]["model_path"] == detected["model_path"]
    assert plan["sources"]["model_path"] == "detected" and plan["sources"]["train_file"] == "detected"


def test_busy_requested_devices_are_an_error_naming_the_free_ones(npu_host):
    env = {"FAKE_NPU_SMI": str(HW / "npu-smi-910b2c-2npu-multiproc.txt")}
    result, data = check_json(npu_host, "--devices", "0,1", extra_env=env)
    assert result.returncode == 1
    busy = [f for f in data["findings"] if f["check"] == "devices"]
    assert busy and "0,1 are in use" in busy[0]["message"]
    assert data["accelerators"]["devices"][0]["processes"][1] == {"pid": 33776, "name": "VLLMWorker_TP", "memory_mb": 31747}


def test_missing_requested_devices(npu_host):
    result, data = check_json(npu_host, "--devices", "0-15")
    assert result.returncode == 1
    message = next(f["message"] for f in data["findings"] if f["check"] == "devices")
    assert "requested 8,9,10,11,12,13,14,15" in message


def test_a3_host_lists_every_chip(npu_host):
    result, data = check_json(npu_host, extra_env={"FAKE_NPU_SMI": str(HW / "npu-smi-a3-16chip-idle.txt")})
    devices = data["accelerators"]["devices"]
    assert [d["id"] for d in devices] == list(range(16))
    assert (devices[5]["npu"], devices[5]["chip"]) == (2, 1)
    assert data["detected"]["devices"] == list(range(16))


def test_dcmi_failure_in_a_container_is_one_clear_error(npu_host):
    result, data = check_json(npu_host, "--device", "npu",
                              extra_env={"FAKE_NPU_SMI": str(HW / "npu-smi-error-dcmi-8005.txt"), "FAKE_NPU_SMI_RC": "255"})
    assert result.returncode == 1
    finding = next(f for f in data["findings"] if f["area"] == "accelerators")
    assert "-8005" in finding["message"] and "/dev/davinci_manager" in finding["fix"]


def test_a_hanging_npu_smi_times_out_and_the_rest_still_answers(npu_host):
    started = time.monotonic()
    result, data = check_json(npu_host, "--probe-timeout", "1", "--device", "npu", extra_env={"FAKE_NPU_SMI_HANG": "1"})
    elapsed = time.monotonic() - started
    assert result.returncode == 1
    assert any("did not answer within 1 s" in f["message"] for f in data["findings"])
    assert data["areas"]["models"]["status"] == "ok" and elapsed < 20


def test_missing_tools_are_findings_not_crashes(npu_host):
    env = {"PATH": f"{Path(sys.executable).parent}:/usr/bin:/bin"}  # no fakes: no npu-smi, nvidia-smi, ray
    result, data = check_json(npu_host, extra_env=env)
    assert result.returncode == 1 and "Traceback" not in result.stderr
    tools = {f["check"]: f["message"] for f in data["findings"] if f["area"] == "accelerators"}
    assert "npu-smi not found" in tools["npu-smi"] and "nvidia-smi not found" in tools["nvidia-smi"]


def test_gpu_host_table_and_csv_fallback(npu_host, tmp_path):
    env = {"FAKE_NPU_SMI": "/nonexistent", "FAKE_NPU_SMI_RC": "127",
           "FAKE_NVIDIA_SMI": str(HW / "nvidia-smi-8xh100-570-idle.txt"),
           "FAKE_NVIDIA_SMI_CSV": str(HW / "nvidia-smi-query-gpu-csv-8xv100-noheader-nounits.DERIVED.txt")}
    result, data = check_json(npu_host, "--device", "gpu", "--framework", "fsdp", extra_env=env)
    assert data["accelerators"]["kind"] == "gpu" and data["accelerators"]["devices"][0]["name"] == "NVIDIA H100 80GB HBM3"
    assert "ascend" not in data["areas"]
    garbage = tmp_path / "odd-table.txt"
    garbage.write_text("Some future nvidia-smi layout nobody has seen\n")
    result, data = check_json(npu_host, "--device", "gpu", extra_env={**env, "FAKE_NVIDIA_SMI": str(garbage)})
    devices = data["accelerators"]["devices"]
    assert [d["name"] for d in devices][:1] == ["Tesla V100-SXM2-32GB"] and devices[6]["hbm_used_mb"] == 13928


@pytest.mark.parametrize("kind, message", [
    ("missing shard", "1 of 2 shards missing"),
    ("bad json", "config.json: cannot be read"),
    ("no tokenizer", "no tokenizer files"),
    ("not there", "does not exist"),
])
def test_broken_model_directories(npu_host, kind, message):
    path = npu_host["tmp"] / "broken-model"
    if kind == "missing shard":
        make_model(path, TINY_MODEL, drop_shard=True)
    elif kind == "bad json":
        make_model(path, TINY_MODEL)
        (path / "config.json").write_text("{not json")
    elif kind == "no tokenizer":
        make_model(path, TINY_MODEL, tokenizer=False)
    result, data = check_json(npu_host, "--model-path", str(path))
    assert result.returncode == 1
    texts = [f"{f['check']}: {f['message']}" for f in data["findings"] if f["area"] == "models"]
    assert any(message in t for t in texts), texts


def test_broken_datasets(npu_host):
    import pyarrow as pa
    import pyarrow.parquet as pq

    tmp = npu_host["tmp"]
    pq.write_table(pa.table({"prompt": ["just a string"], "data_source": ["x"],
                             "reward_model": [{"ground_truth": "1"}]}), tmp / "string-prompt.parquet")
    pq.write_table(pa.table({"question": ["q"], "answer": ["a"]}), tmp / "raw-hf.parquet")
    (tmp / "not.parquet").write_text("PAR1 not really")
    cases = {"string-prompt.parquet": "not a list of {role, content} messages",
             "raw-hf.parquet": "no column 'prompt'", "not.parquet": "not a readable parquet file"}
    for name, message in cases.items():
        result, data = check_json(npu_host, "--train-file", str(tmp / name))
        texts = [f["message"] for f in data["findings"] if f["check"] == "train file"]
        assert result.returncode == 1 and any(message in t for t in texts), (name, texts)


def test_prompt_key_must_exist(npu_host, tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("prompt_key: question\n")
    result, data = check_json(npu_host, "--config", str(config))
    assert any("no column 'question'" in f["message"] for f in data["findings"])


class _Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


def test_swanlab_reachability_against_a_real_listener_and_the_login(npu_host):
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Quiet)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        secret = "sk-test-0123456789abcdef"
        result, data = check_json(npu_host, "--swanlab", "yes", "--swanlab-host", url,
                                  extra_env={"SWANLAB_API_KEY": secret})
        swan = rows(data, "swanlab")
        assert swan["host"]["status"] == "ok" and "answers (HTTP" in swan["host"]["value"]
        assert swan["login"]["status"] == "ok"
        assert secret not in result.stdout + result.stderr
        human = check(npu_host, "--swanlab", "yes", "--swanlab-host", url, extra_env={"SWANLAB_API_KEY": secret})
        assert secret not in human.stdout + human.stderr
    finally:
        server.shutdown()
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        closed = sock.getsockname()[1]
    result, data = check_json(npu_host, "--swanlab", "yes", "--swanlab-host", f"http://127.0.0.1:{closed}")
    swan = rows(data, "swanlab")
    assert swan["host"]["status"] == "error" and swan["login"]["status"] == "error"


def test_docker_daemon_down_is_the_real_clients_message(npu_host, tmp_path):
    """The real docker client against a socket nobody listens on (no fake docker on PATH)."""
    import shutil as _shutil

    real = _shutil.which("docker", path="/usr/local/bin:/usr/bin:/bin")
    if not real:
        pytest.skip("no docker client installed (Debian: docker.io)")
    bin_dir = tmp_path / "bin-real-docker"
    bin_dir.mkdir()
    for fake in FAKES.iterdir():
        if fake.name != "docker":
            (bin_dir / fake.name).symlink_to(fake)
    (bin_dir / "docker").symlink_to(real)
    env = {"PATH": f"{bin_dir}:{npu_host['env']['PATH']}", "DOCKER_HOST": f"unix://{tmp_path}/nobody.sock"}
    result, data = check_json(npu_host, extra_env=env)
    daemon = rows(data, "docker")["daemon"]
    assert daemon["status"] == "warning" and "Cannot connect to the Docker daemon" in daemon["value"]
    assert "nobody.sock" in daemon["value"]
    result, data = check_json(npu_host, "--container", "nope", extra_env=env)
    assert result.returncode == 1 and rows(data, "docker")["daemon"]["status"] == "error"
    assert rows(data, "accelerators")["npu-smi"]["value"].endswith(", host)")  # no container to look into
    # a real container without the NPUs, and probes inside a real one: tests/test_docker_real.py


def test_installed_verl_version_is_detected_and_a_mismatch_is_named(npu_host, tmp_path):
    site = tmp_path / "site"
    (site / "verl-0.9.1.dist-info").mkdir(parents=True)
    (site / "verl-0.9.1.dist-info" / "METADATA").write_text("Metadata-Version: 2.1\nName: verl\nVersion: 0.9.1\n")
    env = {"PYTHONPATH": f"{site}:{npu_host['env']['PYTHONPATH']}"}
    result, data = check_json(npu_host, extra_env=env)
    assert data["detected"]["verl_version"] == "0.9.1" and rows(data, "software")["verl"]["value"] == "0.9.1"
    result, data = check_json(npu_host, "--verl-version", "0.7.0", extra_env=env)
    finding = next(f for f in data["findings"] if f["check"] == "verl version")
    assert finding["level"] == "error" and finding["fix"] == "pass --verl-version 0.9.1"


def test_ray_cluster_reuse_and_a_foreign_listener_on_its_port(npu_host, tmp_path):
    result, data = check_json(npu_host, extra_env={"FAKE_RAY_STATUS": str(HW / "ray-status-2node-16npu.txt")})
    cluster = rows(data, "ray")["cluster"]
    assert cluster["status"] == "ok" and "0/16 NPU in use" in cluster["value"]
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        config = tmp_path / "ray.yaml"
        config.write_text(f"ray_port: {port}\n")
        result, data = check_json(npu_host, "--config", str(config))
        gcs = rows(data, "ray")["GCS port"]
    assert gcs["status"] == "error" and f"{port} is used by" in gcs["value"]


def test_network_interfaces_are_the_real_ones(npu_host):
    import psutil

    result, data = check_json(npu_host)
    network = data["areas"]["network"]["data"]
    real = {name for name, addrs in psutil.net_if_addrs().items() if any(a.family == socket.AF_INET for a in addrs)}
    assert set(network["interfaces"]) == real
    if network["suggested_ifname"]:
        assert data["detected"]["socket_ifname"] == network["suggested_ifname"]
    result, data = check_json(npu_host, "--socket-ifname", "nosuch0")
    assert rows(data, "network")["socket ifname"]["status"] == "error"


def test_disk_against_the_real_free_space(tmp_path):
    from verl_deploy.preflight.commands import Runner
    from verl_deploy.preflight.context import Context
    from verl_deploy.preflight.host import CHECKPOINT_BYTES_PER_PARAM, probe_disk
    from verl_deploy.sources import resolve

    spec = resolve(flags={"ckpts_dir": str(tmp_path / "ckpts" / "new")}, environ={})
    context = Context(spec, Runner(), Runner())
    free = shutil.disk_usage(tmp_path).free
    too_big = probe_disk(context, parameters=2 * free // CHECKPOINT_BYTES_PER_PARAM)
    assert too_big.rows[0].status == "error" and too_big.data["measured"] == str(tmp_path)
    fits = probe_disk(context, parameters=free // (CHECKPOINT_BYTES_PER_PARAM * 10))
    assert fits.rows[0].status == "ok"


def test_human_output_has_a_table_per_area_and_a_verdict(npu_host):
    result = check(npu_host, "--verbose")
    assert result.returncode == 0
    for title in ("Accelerators", "Ascend software", "Docker", "Models", "Datasets", "Network", "Ray", "Disk", "SwanLab"):
        assert title in result.stdout
    assert result.stdout.strip().splitlines()[-1].startswith("ready: 8 NPUs free")
    assert " s" in result.stdout.splitlines()[0]  # --verbose: seconds per probe


def test_a_train_file_smaller_than_one_generation_batch_is_an_error(npu_host, tmp_path):
    """verl's loader drops the incomplete batch (drop_last) and stops with 'Train dataloader is empty!' only after
    loading the model: check says so first, and names the flags that fit the file."""
    from conftest import FIXTURES, write_train_rows

    small = tmp_path / "small.parquet"
    write_train_rows(FIXTURES / "dapo-math-17k.SYNTHETIC.parquet", small, 64)
    result, data = check_json(npu_host, "--train-file", str(small), "--batch-size", "32")  # generation batch 96
    row = rows(data, "datasets")["train file"]
    assert result.returncode == 1 and row["status"] == "error", row
    assert "64 rows" in row["value"] and "96" in row["value"] and "Train dataloader is empty!" in row["value"]
    assert "--gen-batch-size" in row["fix"]
    result, data = check_json(npu_host, "--train-file", str(small), "--batch-size", "16", "--gen-batch-size", "64")
    assert rows(data, "datasets")["train file"]["status"] == "ok"
