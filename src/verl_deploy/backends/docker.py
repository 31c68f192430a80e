"""The container a run uses: reuse a running one, start a stopped one, or create one with the right mounts.

Creation follows the canonical Ascend form (devices `/dev/davinciN` plus `davinci_manager`,
`devmm_svm`, `hisi_hdc`; the DCMI library, `npu-smi`, the driver's lib64 and version files
bind-mounted) or, on NVIDIA, `--gpus all` with the ulimits NGC asks for. Host networking and
IPC so HCCL/NCCL, Gloo and Ray work across nodes. The model, data and checkpoint directories
are mounted at the same paths, so a path means the same inside and out. Proxies go in through
an env file (0600), not through argv.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from verl_deploy.spec import RunSpec

NPU_MANAGEMENT_DEVICES = ("/dev/davinci_manager", "/dev/devmm_svm", "/dev/hisi_hdc")
ASCEND_BINDS = (
    ("/usr/local/dcmi", "/usr/local/dcmi"),
    ("/usr/local/bin/npu-smi", "/usr/local/bin/npu-smi"),
    ("/usr/local/Ascend/driver/lib64/", "/usr/local/Ascend/driver/lib64/"),
    ("/usr/local/Ascend/driver/version.info", "/usr/local/Ascend/driver/version.info"),
    ("/etc/ascend_install.info", "/etc/ascend_install.info"),
)
GPU_FLAGS = ("--gpus", "all", "--ulimit", "memlock=-1", "--ulimit", "stack=67108864")


class DockerError(Exception):
    """A docker command failed; the message is one line for the user."""


@dataclass(frozen=True)
class ContainerState:
    name: str
    exists: bool
    running: bool = False
    status: str | None = None
    image: str | None = None


def docker(args: list[str], *, timeout: float = 120, input: str | None = None) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, input=input)
    except FileNotFoundError:
        raise DockerError("docker not found on this host") from None
    except subprocess.TimeoutExpired:
        raise DockerError(f"`docker {' '.join(args[:2])}` did not finish within {timeout:g} s") from None


def _last_line(result: subprocess.CompletedProcess) -> str:
    lines = (result.stderr.strip() or result.stdout.strip()).splitlines()
    return lines[-1] if lines else f"exit {result.returncode}"


def inspect(name: str) -> ContainerState:
    result = docker(["inspect", "--", name], timeout=30)
    if result.returncode != 0:
        if "No such object" in result.stderr or "No such container" in result.stderr:
            return ContainerState(name, exists=False)
        raise DockerError(f"docker inspect {name}: {_last_line(result)}")
    details = json.loads(result.stdout)[0]
    state = details.get("State") or {}
    return ContainerState(name, True, bool(state.get("Running")), state.get("Status"),
                          (details.get("Config") or {}).get("Image"))


def mounted_paths(spec: RunSpec) -> list[str]:
    """Host directories the run reads or writes, mounted at the same path (existing ones only)."""
    wanted = [spec.model_path, os.path.dirname(spec.train_file), os.path.dirname(spec.test_file)]
    if not spec.effective_ckpts_dir.startswith(spec.run_dir.rstrip("/") + "/"):
        wanted.append(spec.effective_ckpts_dir)
    paths: list[str] = []
    for path in wanted:
        if path and os.path.isdir(path) and not any(path == p or path.startswith(p.rstrip("/") + "/") for p in paths):
            paths = [p for p in paths if not p.startswith(path.rstrip("/") + "/")] + [path]
    return paths


def run_argv(spec: RunSpec, name: str, image: str, env_file: str | None = None, run_dir_mount: str | None = None) -> list[str]:
    """`docker run -d ...` for a new training container (no secret in it)."""
    argv = ["run", "-d", f"--name={name}", "--net=host", "--ipc=host", "--label", "verl-deploy=1"]
    if spec.device == "npu":
        for device in spec.devices:
            argv += ["--device", f"/dev/davinci{device}"]
        for device in NPU_MANAGEMENT_DEVICES:
            argv += ["--device", device]
        for source, target in ASCEND_BINDS:
            argv += ["-v", f"{source}:{target}"]
    else:
        argv += list(GPU_FLAGS)
    for path in mounted_paths(spec):
        argv += ["-v", f"{path}:{path}"]
    if run_dir_mount:
        argv += ["-v", run_dir_mount]
    if env_file:
        argv += ["--env-file", env_file]
    return argv + ["--", image, "sleep", "infinity"]  # "--": an image is never read as an option


def proxy_env(spec: RunSpec) -> dict[str, str]:
    env = {}
    for name in ("http_proxy", "https_proxy"):
        value = getattr(spec, name)
        if value:
            env[name] = env[name.upper()] = value
    return env


def image_present(image: str) -> bool:
    return docker(["image", "inspect", "--", image], timeout=60).returncode == 0


def ensure_container(spec: RunSpec, *, say: Callable[[str], None] = lambda text: None,
                     run_dir_mount: str | None = None) -> ContainerState:
    """Make `spec.container` a running container: reuse, start, or pull and create it."""
    name = spec.container
    if not name:
        raise DockerError("no container chosen (--container NAME)")
    state = inspect(name)
    if state.running:
        say(f"reusing running container {name} ({state.image})")
        return state
    if state.exists:
        say(f"starting stopped container {name}")
        result = docker(["start", "--", name])
        if result.returncode != 0:
            raise DockerError(f"docker start {name}: {_last_line(result)}")
        return inspect(name)
    if not image_present(spec.image):
        say(f"pulling {spec.image} (this can take a while)")
        result = docker(["pull", "--", spec.image], timeout=3600)
        if result.returncode != 0:
            raise DockerError(f"docker pull {spec.image}: {_last_line(result)}")
    env = proxy_env(spec)
    env_file = None
    try:
        if env:
            fd, env_file = tempfile.mkstemp(prefix="verl-deploy-env-")
            with os.fdopen(fd, "w") as handle:
                handle.write("".join(f"{k}={v}\n" for k, v in env.items()))
        say(f"creating container {name} from {spec.image}")
        result = docker(run_argv(spec, name, spec.image, env_file, run_dir_mount), timeout=300)
    finally:
        if env_file:
            Path(env_file).unlink(missing_ok=True)
    if result.returncode != 0:
        raise DockerError(f"docker run {name}: {_last_line(result)}")
    return inspect(name)
