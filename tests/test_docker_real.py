"""The container stage against a real Docker engine (tests/realdocker.py): create, devices, mounts,
offline images, and the whole launch inside a container (OOM ladder with resume, stop, restart).

Only the NPUs are stand-ins: character device nodes made with mknod (the Ascend names, mapped with
`--device HOST:/dev/davinciN`), and npu-smi / ray inside the container are the fakes that print the
real formats. Everything else — dockerd, containers, docker cp / exec, the stand-in trainer's
processes inside the container — is real.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import FAKES, FIXTURES, HW, TRAIN_ROWS, VERL_BIN, child_env, make_model, TINY_MODEL, write_train_rows

STANDIN = Path(__file__).parent / "standin_trainer.py"
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="a private dockerd and mknod need root")


def host_bin(tmp: Path) -> Path:
    """PATH entries for the host: the fake npu-smi and ray, and the REAL docker client (no fake docker)."""
    bin_dir = tmp / "host-bin"
    bin_dir.mkdir(exist_ok=True)
    for name in ("npu-smi", "ray"):
        link = bin_dir / name
        if not link.exists():
            link.symlink_to(FAKES / name)
    return bin_dir


def cli_env(engine, tmp: Path, **extra: str) -> dict:
    env = {**os.environ, **engine.env(), "COLUMNS": "200",
           "PATH": f"{host_bin(tmp)}:{Path(sys.executable).parent}:/usr/local/bin:/usr/bin:/bin",
           "FAKE_NPU_SMI": str(HW / "npu-smi-910b3-8npu-idle.txt"),
           "VERL_DEPLOY_STATE_DIR": str(tmp / "state"), "VERL_DEPLOY_CONFIG_DIR": str(tmp / "config"),
           "HOME": str(tmp / "home")}
    env.update(extra)
    return child_env(env)


def cli(env: dict, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    return subprocess.run([*VERL_BIN, *args], capture_output=True, text=True, env=env, timeout=timeout)


def make_device_nodes(root: Path, names: list[str]) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    for name in names:
        os.mknod(root / name, 0o666 | 0o020000, os.makedev(1, 3))  # a character device, like /dev/davinciN
    return root


def unique(prefix: str) -> str:
    return f"{prefix}-{os.getpid()}-{time.monotonic_ns() % 10**9}"


def inspect(engine, name: str) -> dict:
    return json.loads(engine.docker("container", "inspect", name).stdout)[0]


def test_create_maps_the_device_nodes_and_driver_paths_that_exist_and_never_makes_the_missing_ones(docker_engine, tmp_path):
    devs = make_device_nodes(tmp_path / "dev", [f"davinci{i}" for i in range(8)] + ["davinci_manager", "devmm_svm"])
    driver = tmp_path / "driver-root"
    (driver / "usr/local/bin").mkdir(parents=True)
    (driver / "usr/local/bin/npu-smi").write_text("#!/bin/sh\necho npu-smi from the host\n")
    (driver / "usr/local/bin/npu-smi").chmod(0o755)
    (driver / "etc").mkdir()
    (driver / "etc/ascend_install.info").write_text("Driver_Install_Path_Param=/usr/local/Ascend\n")
    name = unique("vd-create")
    env = cli_env(docker_engine, tmp_path, VERL_DEPLOY_DEV_ROOT=str(devs), VERL_DEPLOY_DRIVER_ROOT=str(driver))
    result = cli(env, "container", "create", docker_engine.image, name, "--devices", "0-7", "--yes")
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"container {name} is running" in result.stdout
    for missing in ("hisi_hdc", "usr/local/dcmi", "driver/lib64", "driver/version.info"):
        assert missing in result.stderr  # a warning names each path not mounted
    details = inspect(docker_engine, name)
    mapped = {d["PathInContainer"]: d["PathOnHost"] for d in details["HostConfig"]["Devices"]}
    assert {f"/dev/davinci{i}" for i in range(8)} | {"/dev/davinci_manager", "/dev/devmm_svm"} == set(mapped)
    assert mapped["/dev/davinci7"] == str(devs / "davinci7")
    assert details["HostConfig"]["NetworkMode"] == "host" and details["HostConfig"]["IpcMode"] == "host"
    inside = docker_engine.docker("exec", name, "sh", "-c", "test -c /dev/davinci7 && /usr/local/bin/npu-smi && "
                                  "cat /etc/ascend_install.info")
    assert "npu-smi from the host" in inside.stdout and "Driver_Install_Path_Param" in inside.stdout
    # Docker would have created every missing bind source as an empty directory on the host
    for never in ("usr/local/dcmi", "usr/local/Ascend"):
        assert not (driver / never).exists()
    again = cli(env, "container", "create", docker_engine.image, name, "--yes")
    assert again.returncode == 0 and f"reusing running container {name}" in again.stderr


def test_create_refuses_with_the_list_when_no_device_node_exists(docker_engine, tmp_path):
    devs = make_device_nodes(tmp_path / "dev", ["davinci0", "davinci1"])
    name = unique("vd-nodev")
    env = cli_env(docker_engine, tmp_path, VERL_DEPLOY_DEV_ROOT=str(devs), VERL_DEPLOY_DRIVER_ROOT=str(tmp_path))
    result = cli(env, "container", "create", docker_engine.image, name, "--devices", "4-7", "--yes")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    assert "davinci4" in result.stderr and "present: davinci0, davinci1" in result.stderr
    partly = cli(env, "container", "create", docker_engine.image, name, "--devices", "0-3", "--yes")
    assert partly.returncode == 1 and "davinci2" in partly.stderr and "davinci3" in partly.stderr
    none = cli(cli_env(docker_engine, tmp_path, VERL_DEPLOY_DEV_ROOT=str(tmp_path / "empty")),
               "container", "create", docker_engine.image, name, "--yes")
    assert none.returncode == 1 and "is the NPU driver installed" in none.stderr
    assert docker_engine.docker("container", "inspect", name, check=False).returncode != 0  # nothing created


def test_user_mounts_are_bound_checked_and_never_read_as_options(docker_engine, tmp_path):
    data = tmp_path / "data"
    data.mkdir()
    (data / "train.parquet").write_text("rows")
    name = unique("vd-mount")
    env = cli_env(docker_engine, tmp_path)
    result = cli(env, "container", "create", docker_engine.image, name, "--device", "gpu", "--yes",
                 "--mount", f"{data}:/data:ro")
    # --gpus all needs the NVIDIA runtime, which this engine does not have: the engine's own message
    assert result.returncode == 1 and "docker run" in result.stderr and "Traceback" not in result.stderr
    devs = make_device_nodes(tmp_path / "dev", [f"davinci{i}" for i in range(8)])
    env = cli_env(docker_engine, tmp_path, VERL_DEPLOY_DEV_ROOT=str(devs), VERL_DEPLOY_DRIVER_ROOT=str(tmp_path))
    result = cli(env, "container", "create", docker_engine.image, name, "--yes", "--mount", f"{data}:/data:ro")
    assert result.returncode == 0, result.stderr[-2000:]
    assert docker_engine.docker("exec", name, "cat", "/data/train.parquet").stdout == "rows"
    readonly = docker_engine.docker("exec", name, "touch", "/data/new", check=False)
    assert readonly.returncode != 0 and "Read-only file system" in readonly.stderr
    for bad, says in ((f"{tmp_path}/absent:/x", "does not exist on this host"), ("-v:/x", "starts with '-'"),
                      (f"{data}:/x\n:/y", "control character"), (f"{data}", "HOST:CONTAINER")):
        other = unique("vd-badmount")
        refused = cli(env, "container", "create", docker_engine.image, other, "--yes", "--mount", bad)
        assert refused.returncode == 1 and says in refused.stderr and "Traceback" not in refused.stderr, refused.stderr
        assert len(refused.stderr.strip().splitlines()) <= 3
        assert docker_engine.docker("container", "inspect", other, check=False).returncode != 0
    assert not (tmp_path / "absent").exists()


def test_an_image_from_a_tarball_and_a_registry_that_cannot_be_reached(docker_engine, tmp_path):
    offline = f"verl-deploy-test/offline:{os.getpid()}"
    docker_engine.docker("tag", docker_engine.image, offline)
    tarball = tmp_path / "image.tar"
    docker_engine.docker("save", offline, "-o", str(tarball), timeout=300)
    docker_engine.docker("rmi", offline)
    devs = make_device_nodes(tmp_path / "dev", [f"davinci{i}" for i in range(8)])
    env = cli_env(docker_engine, tmp_path, VERL_DEPLOY_DEV_ROOT=str(devs), VERL_DEPLOY_DRIVER_ROOT=str(tmp_path))
    name = unique("vd-load")
    result = cli(env, "container", "create", offline, name, "--yes", "--image-file", str(tarball))
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"loading {tarball}" in result.stderr and inspect(docker_engine, name)["Config"]["Image"] == offline

    # a registry that accepts connections and never answers: the pull is bounded by --pull-timeout
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(8)
    port = listener.getsockname()[1]
    accepted = []
    def hold_connections():
        try:
            for _ in range(8):
                accepted.append(listener.accept())
        except OSError:  # the listener was closed: the test is past this point
            pass

    threading.Thread(target=hold_connections, daemon=True).start()
    started = time.monotonic()
    hung = cli(env, "container", "create", f"127.0.0.1:{port}/verl:never", unique("vd-hang"), "--yes",
               "--pull-timeout", "3")
    assert hung.returncode == 1 and time.monotonic() - started < 60
    assert "did not finish within 3 s" in hung.stderr and "--image-file" in hung.stderr
    listener.close()
    # a registry whose name does not resolve (this host has no registry access): said plainly, at once
    unreachable = cli(env, "container", "create", "quay.io/ascend/verl:verl-deploy-test-absent", unique("vd-noreg"),
                      "--yes", "--pull-timeout", "60")
    assert unreachable.returncode == 1 and "Traceback" not in unreachable.stderr
    assert ("not reachable from this host" in unreachable.stderr or "did not finish" in unreachable.stderr)
    assert "--image-file" in unreachable.stderr


# -- the whole launch inside a container -------------------------------------------------------------

@pytest.fixture()
def in_container(docker_engine, tmp_path):
    """A running container sharing the test's temp dir at the same path, with the stand-in as verl's entry
    module, and the fake ray and npu-smi (real formats) inside; `launch --container` reuses it."""
    verl = tmp_path / "verl"
    for module in ("recipe/dapo/main_dapo.py", "recipe/one_step_off_policy/main_ppo.py"):
        (verl / module).parent.mkdir(parents=True, exist_ok=True)
        (verl / module).write_text(STANDIN.read_text())
    root = tmp_path / "mnt"
    make_model(root / "models" / "Qwen3-8B", TINY_MODEL)
    (root / "data").mkdir(parents=True)
    write_train_rows(FIXTURES / "dapo-math-17k.SYNTHETIC.parquet", root / "data" / "dapo-math-17k.parquet", TRAIN_ROWS)
    (root / "data" / "aime-2024.parquet").write_bytes((FIXTURES / "aime-2024.SYNTHETIC.parquet").read_bytes())
    npu_smi_out = tmp_path / "npu-smi.txt"
    npu_smi_out.write_text((HW / "npu-smi-910b3-8npu-idle.txt").read_text())

    devs = make_device_nodes(tmp_path / "dev", [f"davinci{i}" for i in range(8)] +
                             ["davinci_manager", "devmm_svm", "hisi_hdc"])

    def start(name: str, **env: str) -> str:
        """An Ascend-shaped container: the eight NPU nodes and the management devices, CANN's set_env.sh."""
        args = ["run", "-d", f"--name={name}", "--network=host", "--shm-size=1g", "-v", f"{tmp_path}:{tmp_path}",
                "-e", f"FAKE_NPU_SMI={npu_smi_out}", "-e", "STANDIN_STEP_SECONDS=0.3"]
        for node in sorted(devs.iterdir()):
            args += ["--device", f"{node}:/dev/{node.name}"]
        for key, value in env.items():
            args += ["-e", f"{key}={value}"]
        docker_engine.docker(*args, docker_engine.image, "sleep", "infinity")
        for fake in ("ray", "npu-smi"):
            docker_engine.docker("cp", str(FAKES / fake), f"{name}:/usr/local/bin/{fake}")
        docker_engine.docker("exec", name, "sh", "-c", "mkdir -p /usr/local/Ascend/ascend-toolkit /usr/local/Ascend/"
                             "nnal/atb /usr/local/Ascend/driver && echo '# CANN' > /usr/local/Ascend/ascend-toolkit/"
                             "set_env.sh && echo '# ATB' > /usr/local/Ascend/nnal/atb/set_env.sh && "
                             "echo Version=24.1.rc2 > /usr/local/Ascend/driver/version.info")
        return name

    env = cli_env(docker_engine, tmp_path)
    args = ["--yes", "--search-root", str(root), "--model-path", str(root / "models" / "Qwen3-8B"),
            "--train-file", str(root / "data" / "dapo-math-17k.parquet"),
            "--test-file", str(root / "data" / "aime-2024.parquet"), "--run-dir", str(verl),
            "--ckpts-dir", str(tmp_path / "ckpts"), "--train-steps", "8", "--save-freq", "2", "--backend", "docker"]
    return {"start": start, "env": env, "args": args, "tmp": tmp_path, "engine": docker_engine}


def status(ctx, run_id: str) -> dict:
    return json.loads(cli(ctx["env"], "status", run_id, "--json").stdout)


def wait_for(ctx, run_id: str, predicate, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    data: dict = {}
    while time.monotonic() < deadline:
        data = status(ctx, run_id)
        if predicate(data):
            return data
        time.sleep(0.5)
    raise AssertionError(f"timed out; last status: {json.dumps(data)[:2000]}")


def trainer_processes(ctx, name: str) -> list[str]:
    listed = ctx["engine"].docker("exec", name, "ps", "-eo", "args", check=False).stdout.splitlines()
    return [line for line in listed if "main_dapo" in line]


def test_launch_in_a_container_recovers_from_oom_with_resume_inside_it(in_container):
    name = in_container["start"](unique("vd-train"), STANDIN_FAIL="device_oom")
    result = cli(in_container["env"], "launch", *in_container["args"], "--container", name, "--follow", "--json",
                 timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    final = json.loads(result.stdout)
    assert final["state"] == "succeeded" and final["step"] == 8
    attempts = final["attempts"]
    assert [a["features"] for a in attempts][1:] and "offload" in attempts[1]["features"]
    assert "recompute" in attempts[2]["features"] and attempts[2]["resumed_from_step"] >= 2
    # the training ran inside the container: its checkpoints are the stand-in's, written in there
    assert (in_container["tmp"] / "ckpts" / "latest_checkpointed_iteration.txt").read_text().strip() == "8"
    first = cli(in_container["env"], "logs", final["id"], "--attempt", "1").stdout
    last = cli(in_container["env"], "logs", final["id"]).stdout
    assert "NPU out of memory" in first and "Load from checkpoint folder" in last
    assert not trainer_processes(in_container, name)


def test_launch_starts_a_stopped_container_and_copies_the_scripts_in(in_container):
    name = in_container["start"](unique("vd-exited"))
    in_container["engine"].docker("stop", "-t", "1", name)
    result = cli(in_container["env"], "launch", *in_container["args"], "--container", name, "--follow", "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    final = json.loads(result.stdout)
    assert final["state"] == "succeeded" and f"starting stopped container {name}" in result.stderr
    remote = f"{in_container['tmp'] / 'verl'}/verl-deploy-runs/{final['id']}/attempt-1"
    listed = in_container["engine"].docker("exec", name, "ls", remote).stdout.split()
    assert {"start_verl.sh", "run_training.sh", "pid"} <= set(listed)


def test_stop_ends_the_training_inside_and_leaves_the_container_running(in_container):
    name = in_container["start"](unique("vd-stop"), STANDIN_FAIL="hang", STANDIN_FAIL_STEP="2")
    result = cli(in_container["env"], "launch", *in_container["args"], "--container", name, "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    run = json.loads(result.stdout)
    wait_for(in_container, run["id"], lambda d: (d.get("step") or 0) >= 1)
    assert trainer_processes(in_container, name)
    stopped = cli(in_container["env"], "stop", run["id"])
    assert stopped.returncode == 0, stopped.stderr
    wait_for(in_container, run["id"], lambda d: d["state"] == "stopped")
    deadline = time.monotonic() + 30
    while trainer_processes(in_container, name) and time.monotonic() < deadline:
        time.sleep(0.5)
    assert not trainer_processes(in_container, name)
    assert inspect(in_container["engine"], name)["State"]["Running"] is True


def test_status_after_the_container_was_restarted_says_so(in_container):
    name = in_container["start"](unique("vd-restart"), STANDIN_FAIL="hang", STANDIN_FAIL_STEP="3")
    result = cli(in_container["env"], "launch", *in_container["args"], "--container", name, "--json")
    assert result.returncode == 0, result.stderr[-3000:]
    run = json.loads(result.stdout)
    wait_for(in_container, run["id"], lambda d: (d.get("step") or 0) >= 1)
    in_container["engine"].docker("restart", "-t", "1", name)
    final = wait_for(in_container, run["id"], lambda d: d["state"] in ("failed", "succeeded", "stopped"))
    assert final["state"] == "failed"
    assert final["failure"]["class"] == "container_restarted", final["failure"]
    human = cli(in_container["env"], "status", run["id"]).stdout
    assert f"container {name} was restarted" in human


def area_rows(data: dict, area: str) -> dict:
    return {row["check"]: row for row in data["areas"][area]["rows"]}


def test_check_reads_the_real_container_and_probes_inside_it(in_container):
    def docker_rows(name: str) -> tuple[dict, dict]:
        result = cli(in_container["env"], "check", "--container", name, "--json", "--search-root",
                     str(in_container["tmp"] / "mnt"), "--ckpts-dir", str(in_container["tmp"] / "ckpts"))
        data = json.loads(result.stdout)
        return area_rows(data, "docker"), data

    name = in_container["start"](unique("vd-check"))
    rows, data = docker_rows(name)
    assert rows["NPU devices"]["status"] == "ok" and "/dev/davinci7, /dev/davinci_manager" in rows["NPU devices"]["value"]
    assert rows["shm"]["status"] == "warning" and "1" in rows["shm"]["value"], rows["shm"]  # 1 GiB < 16 GiB
    assert f"container {name}" in area_rows(data, "accelerators")["npu-smi"]["value"]  # npu-smi ran inside it
    assert "3.11.2" in json.dumps(data["areas"]["software"])  # the container's Debian python, not this host's
    assert rows["checkpoints"]["status"] == "ok" and f"{in_container['tmp']} ->" in rows["mounts"]["value"]
    bare = unique("vd-check-bare")
    in_container["engine"].docker("run", "-d", f"--name={bare}", "--network=host", in_container["engine"].image,
                                  "sleep", "infinity")
    rows, _ = docker_rows(bare)
    assert rows["NPU devices"]["status"] == "error" and "/dev/davinci0" in rows["NPU devices"]["value"]
    assert rows["checkpoints"]["status"] == "warning" and rows["mounts"]["value"] == "none"
