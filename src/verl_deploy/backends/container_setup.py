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
import re
import stat
import subprocess
import tempfile
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Callable

from verl_deploy.backends.protocol import BackendError
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


class DockerError(BackendError):
    """A docker command failed or a container cannot be made as asked; one line for the user, and the fix."""

    failure_class = "container_failed"

    def __init__(self, message: str, fix: str | None = None):
        super().__init__(message, fix or "check `docker ps -a` and the daemon; see `verl-deploy check`")


def preflight(spec: RunSpec) -> list[str]:
    """What creating the container would refuse, before anything runs; returns the warnings it would give."""
    mount_args(spec)
    return device_args(spec)[1]


@dataclass(frozen=True)
class ContainerState:
    name: str
    exists: bool
    running: bool = False
    status: str | None = None
    image: str | None = None
    started_at: float | None = None  # epoch seconds of the last (re)start


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


def _epoch(stamp: str | None) -> float | None:
    """docker's RFC 3339 time with nanoseconds (`2026-11-30T19:34:41.123456789Z`) as epoch seconds."""
    if not stamp or stamp.startswith("0001-"):
        return None
    match = re.fullmatch(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?(Z|[+-]\d\d:\d\d)", stamp)
    if not match:
        return None
    zone = "+00:00" if match.group(3) == "Z" else match.group(3)
    moment = datetime.fromisoformat(match.group(1) + zone)
    return moment.timestamp() + float("0." + (match.group(2) or "0"))


def inspect(name: str) -> ContainerState:
    result = docker(["container", "inspect", "--", name], timeout=30)
    if result.returncode != 0:
        if "No such object" in result.stderr or "No such container" in result.stderr:
            return ContainerState(name, exists=False)
        raise DockerError(f"docker inspect {name}: {_last_line(result)}")
    try:
        details = json.loads(result.stdout)[0]
    except (ValueError, IndexError, KeyError):
        raise DockerError(f"docker inspect {name}: unreadable answer") from None
    state = details.get("State") or {}
    return ContainerState(name, True, bool(state.get("Running")), state.get("Status"),
                          (details.get("Config") or {}).get("Image"), _epoch(state.get("StartedAt")))


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


def device_root() -> Path:
    """Where the host's device nodes are (`/dev`; tests point it at mknod-made nodes)."""
    return Path(os.environ.get("VERL_DEPLOY_DEV_ROOT", "/dev"))


def driver_root() -> Path:
    """Prefix of the Ascend driver paths on the host (`/`; tests point it at a stand-in tree)."""
    return Path(os.environ.get("VERL_DEPLOY_DRIVER_ROOT", "/"))


def _is_char_device(path: Path) -> bool:
    try:
        return stat.S_ISCHR(path.stat().st_mode)
    except OSError:
        return False


def device_args(spec: RunSpec) -> tuple[list[str], list[str]]:
    """`--device`/`-v` arguments for the devices and driver paths that exist on this host, and warnings.

    Docker turns a missing bind source into an empty directory on the host (`/usr/local/bin/npu-smi`
    becoming a directory breaks the host's own npu-smi), so only present paths are mounted.
    """
    if spec.device != "npu":
        return list(GPU_FLAGS), []
    root = device_root()
    nodes = {device: root / f"davinci{device}" for device in spec.devices}
    missing = [str(path) for path in nodes.values() if not _is_char_device(path)]
    if len(missing) == len(nodes):
        present = sorted(p.name for p in root.glob("davinci[0-9]*") if _is_char_device(p))
        raise DockerError(f"no Ascend device node for --devices {','.join(map(str, spec.devices))}: "
                          f"{', '.join(missing[:8])}{' ...' if len(missing) > 8 else ''} do not exist"
                          + (f" (present: {', '.join(present)})" if present else
                             " (no /dev/davinci* at all: is the NPU driver installed? `npu-smi info`)"),
                          "pass --devices with the NPUs this host has (`ls /dev/davinci*`), or --device gpu")
    if missing:
        raise DockerError(f"device nodes missing on this host: {', '.join(missing)}",
                          "choose --devices among the ones present (`ls /dev/davinci*`)")
    args: list[str] = []
    for device, path in nodes.items():
        args += ["--device", f"{path}:/dev/davinci{device}"]
    warnings = []
    for name in NPU_MANAGEMENT_DEVICES:
        path = root / os.path.basename(name)
        if _is_char_device(path):
            args += ["--device", f"{path}:{name}"]
        else:
            warnings.append(f"{path} is missing on this host: not mapped (the NPUs may not open in the container)")
    for source, target in ASCEND_BINDS:
        host_path = driver_root() / source.lstrip("/")
        if host_path.exists():
            args += ["-v", f"{host_path}:{target}"]
        else:
            warnings.append(f"driver path {host_path} is missing on this host: not mounted")
    return args, warnings


def mount_args(spec: RunSpec) -> list[str]:
    """The user's own `--mount HOST:CONTAINER[:ro]` binds; a missing host path is refused, never created."""
    from verl_deploy.spec import mount_destination

    # the driver paths device_args binds (those present on this host): docker refuses a second mount there
    driver_targets = {os.path.normpath(target) for source, target in ASCEND_BINDS
                      if spec.device == "npu" and (driver_root() / source.lstrip("/")).exists()}
    args: list[str] = []
    for mount in spec.mounts:
        if mount_destination(mount) in driver_targets:
            raise DockerError(f"--mount {mount}: the container gets the host's Ascend driver at "
                              f"{mount_destination(mount)} already (docker refuses a duplicate mount point)",
                              "mount it at another container path")
        host = mount.split(":", 1)[0]
        if not os.path.exists(host):
            raise DockerError(f"--mount {mount}: {host} does not exist on this host (docker would create it empty)",
                              "create the directory first or fix the path")
        args += ["-v", mount]
    return args


def run_argv(spec: RunSpec, name: str, image: str, env_file: str | None = None, run_dir_mount: str | None = None,
             devices: list[str] | None = None) -> list[str]:
    """`docker run -d ...` for a new training container (no secret in it)."""
    argv = ["run", "-d", f"--name={name}", "--net=host", "--ipc=host", "--label", "verl-deploy=1"]
    argv += device_args(spec)[0] if devices is None else devices
    from verl_deploy.spec import mount_destination

    own = {mount_destination(mount) for mount in spec.mounts}
    for path in mounted_paths(spec):
        if os.path.normpath(path) not in own:  # the user's --mount at that path wins (docker refuses both)
            argv += ["-v", f"{path}:{path}"]
    argv += mount_args(spec)
    if run_dir_mount:
        argv += ["-v", run_dir_mount]
    if env_file:
        argv += [f"--env-file={env_file}"]
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


REGISTRY_UNREACHABLE = re.compile(r"no such host|connection refused|i/o timeout|dial tcp|TLS handshake timeout|"
                                  r"Client\.Timeout|network is unreachable|server misbehaving|no route to host",
                                  re.IGNORECASE)


def pull(image: str, timeout: float) -> None:
    """`docker pull` within `timeout` seconds; a registry this host cannot reach is said plainly."""
    offline_fix = (f"load it from a tarball instead: --image-file FILE (made where it can be pulled: "
                   f"`docker save {image} -o FILE`)")
    try:
        result = docker(["pull", "--", image], timeout=timeout)
    except DockerError:
        raise DockerError(f"docker pull {image} did not finish within {timeout:g} s (--pull-timeout); "
                          f"{offline_fix}") from None
    if result.returncode != 0:
        if REGISTRY_UNREACHABLE.search(result.stderr):
            raise DockerError(f"cannot pull {image}: the registry is not reachable from this host "
                              f"({_last_line(result)[-160:]}); {offline_fix}")
        raise DockerError(f"docker pull {image}: {_last_line(result)}")


def load(image_file: str) -> list[str]:
    """`docker load` a tarball; the image names it brought (or ids when it had no tag)."""
    if not os.path.isfile(image_file):
        raise DockerError(f"--image-file {image_file}: no such file", "pass the path of a `docker save` tarball")
    result = docker(["load", f"--input={image_file}"], timeout=3600)
    if result.returncode != 0:
        raise DockerError(f"docker load --input {image_file}: {_last_line(result)}")
    return re.findall(r"^Loaded image(?: ID)?: (\S+)$", result.stdout, re.MULTILINE)


def ensure_image(spec: RunSpec, say: Callable[[str], None]) -> str:
    """The image to create from: present already, loaded from --image-file, or pulled (bounded)."""
    if image_present(spec.image):
        return spec.image
    if spec.image_file:
        say(f"loading {spec.image_file}")
        loaded = load(spec.image_file)
        if spec.image in loaded or image_present(spec.image):
            return spec.image
        if len(loaded) == 1:
            say(f"{spec.image} is not in {spec.image_file}; using the image it holds: {loaded[0]}")
            return loaded[0]
        raise DockerError(f"{spec.image_file} holds {', '.join(loaded) or 'no image'}, not {spec.image}; "
                          f"pass --image with one of them")
    say(f"pulling {spec.image} (this can take a while; at most {spec.pull_timeout} s)")
    pull(spec.image, spec.pull_timeout)
    return spec.image


def ensure_container(spec: RunSpec, *, say: Callable[[str], None] = lambda text: None,
                     warn: Callable[[str], None] | None = None, run_dir_mount: str | None = None) -> ContainerState:
    """Make `spec.container` a running container: reuse, start, or load/pull and create it."""
    warn = warn or say
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
    devices, warnings = device_args(spec)  # refuse before any pull or load
    mount_args(spec)
    image = ensure_image(spec, say)
    for text in warnings:
        warn(text)
    env = proxy_env(spec)
    env_file = None
    try:
        if env:
            fd, env_file = tempfile.mkstemp(prefix="verl-deploy-env-")
            with os.fdopen(fd, "w") as handle:
                handle.write("".join(f"{k}={v}\n" for k, v in env.items()))
        say(f"creating container {name} from {image}")
        result = docker(run_argv(spec, name, image, env_file, run_dir_mount, devices), timeout=300)
    finally:
        if env_file:
            Path(env_file).unlink(missing_ok=True)
    if result.returncode != 0:
        left = inspect(name)
        if left.exists and left.status == "created":  # `docker run` made it, then could not start it
            docker(["rm", "--", name], timeout=60)
        raise DockerError(f"docker run {name}: {_last_line(result)}")
    return inspect(name)
