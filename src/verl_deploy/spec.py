"""RunSpec: one immutable, fully resolved description of a training run.

Every field has a default here (the seeds' defaults where they give one), and is declared
here once (``spec_field``, declared.py): its flag, help and panel, environment variable, the
sections of the config file, the wizard, `plan` and the confirmation, whether it is secret and
the knob it is sent as. The CLI options, the environment map, the config file, the generic
wizard rounds and the views are generated from these declarations (``listing``, ``env_vars``).
Where a value comes from (default, detected, file, env, flag, answer, derived) is kept beside
it in ``RunSpec.sources`` so that `plan` and the confirmation can show it.
Cross-field rules live in ``checks.py``; this module only knows single fields.
"""

from __future__ import annotations

import re
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from verl_deploy import boundedread, names
from verl_deploy.declared import FieldMeta, sections, spec_field

Mode = Literal["dapo", "one-step-off", "colocate-async", "separate-async", "fully-async"]
Algorithm = Literal["dapo", "grpo"]
Framework = Literal["megatron", "fsdp"]
Device = Literal["npu", "gpu"]

DEFAULT_VERL_VERSION = "0.7.0"
DEFAULT_IMAGE = "quay.io/ascend/verl:verl-8.3.rc1-910b-ubuntu22.04-py3.11-v0.7.0"  # images.py's 0.7.0 A2 row


# No node has more accelerators than this; a bound checked before a range is expanded, so
# `--devices 0-99999999` is one error line instead of gigabytes of ids.
MAX_DEVICE_IDS = 64
MAX_HOSTFILE_BYTES = 1 << 20  # 1024 hosts of any sane name, with comments


def _too_many(count: int) -> ValueError:
    return ValueError(f"{count} device ids, but a node has at most {MAX_DEVICE_IDS} "
                      f"(give the ids of one node, e.g. 0-7; --nnodes counts the nodes)")


def parse_devices(value: object) -> list[int]:
    """Accept "0,1,2", "0-3", [0, 1] or 8 (meaning 0..7); at most MAX_DEVICE_IDS ids, each below it."""
    if isinstance(value, bool) or value is None or isinstance(value, (float, dict)):
        raise ValueError("expected device ids like 0,1,2,3, a range 0-7 or a count 8")
    if isinstance(value, int):
        return _device_count(value)
    if isinstance(value, (list, tuple)):
        items: list[object] = list(value)
    else:
        items = [p for p in re.split(r"[,\s]+", str(value)[:10_000].strip()) if p]
    if len(items) > MAX_DEVICE_IDS:
        raise _too_many(len(items))
    devices: list[int] = []
    for item in items:
        devices.extend(_device_ids(str(item).strip() if not isinstance(item, bool) else "?", len(devices)))
    if not devices:
        raise ValueError("no device ids given")
    return devices


def _device_count(count: int) -> list[int]:
    """8 -> 0..7."""
    if count < 1:
        raise ValueError("a device count must be at least 1")
    if count > MAX_DEVICE_IDS:
        raise _too_many(count)
    return list(range(count))


def _device_ids(text: str, before: int) -> list[int]:
    """One item of a device list, "3" or "0-7", with `before` ids already taken from the list."""
    if re.fullmatch(r"\d{1,9}-\d{1,9}", text):
        lo, hi = (int(x) for x in text.split("-"))
        if hi < lo:
            raise ValueError(f"range {text!r} runs backwards")
        if hi >= MAX_DEVICE_IDS or before + hi - lo + 1 > MAX_DEVICE_IDS:
            raise ValueError(f"range {text!r} is beyond a node's {MAX_DEVICE_IDS} devices (use ids "
                             f"0-{MAX_DEVICE_IDS - 1}, e.g. 0-7)")
        return list(range(lo, hi + 1))
    if re.fullmatch(r"\d{1,9}", text):
        if int(text) >= MAX_DEVICE_IDS:
            raise ValueError(f"device id {text} is beyond a node's {MAX_DEVICE_IDS} devices (use ids "
                             f"0-{MAX_DEVICE_IDS - 1})")
        return [int(text)]
    raise ValueError(f"{text[:40]!r} is not a device id (expected ids like 0,1,2,3 or a range 0-7)")


def parse_hosts(value: object) -> list[str]:
    """"h1,h2", a list, or "@hostfile" (one host per line, # comments): the head first."""
    if value is None:
        return []
    if not isinstance(value, (str, list, tuple)) or (isinstance(value, (list, tuple))
                                                     and not all(isinstance(v, str) for v in value)):
        raise ValueError("expected host names: h1,h2, a list of names, or @hostfile")
    if isinstance(value, str) and not value.strip():
        raise names.NameProblem("no host given", "give the hosts head first: --nodes h1,h2 (or @hostfile), "
                                "or leave --nodes out for one node")
    if isinstance(value, str) and value.startswith("@"):
        try:
            lines = boundedread.read_text(value[1:], MAX_HOSTFILE_BYTES, f"the host file {value[1:]!r}").splitlines()
        except FileNotFoundError:
            raise ValueError(f"cannot read the host file {value[1:]!r}: no such file") from None
        items: list = [line.split("#", 1)[0] for line in lines]
    else:
        items = value.split(",") if isinstance(value, str) else list(value)
    if len(items) > 1024:
        raise ValueError(f"{len(items)} hosts; at most 1024")
    hosts = [str(v).strip(" ") for v in items if str(v).strip()]
    for host in hosts:
        names.ssh_destination(host)
    twice = sorted({host for host in hosts if hosts.count(host) > 1})
    if twice:
        raise names.NameProblem(f"{', '.join(twice)} named twice: each node is one host and runs one Ray node",
                                "name every host once, head first (--nodes h1,h2)")
    return hosts


def parse_mount(value: str) -> str:
    """HOST:CONTAINER[:ro|rw], both absolute; refused when it could be read as an option or split a line."""
    if re.search(r"[\x00-\x1f\x7f]", value):
        raise ValueError(f"{value!r} contains a control character (newline, tab, ...)")
    if value.startswith("-"):
        raise ValueError(f"{value!r} starts with '-' (it would reach docker as an option)")
    parts = value.split(":")
    if len(parts) not in (2, 3) or (len(parts) == 3 and parts[2] not in ("ro", "rw")):
        raise ValueError(f"{value!r} is not HOST:CONTAINER or HOST:CONTAINER:ro")
    if not all(part.startswith("/") for part in parts[:2]):
        raise ValueError(f"{value!r}: both paths must be absolute")
    if mount_destination(value) == "/":
        raise names.NameProblem(f"{value!r} mounts over the container's / (docker refuses that destination)",
                                "mount it at a directory, e.g. --mount /data:/data")
    return value


def mount_destination(mount: str) -> str:
    """Where a HOST:CONTAINER[:ro] bind lands, as docker compares it (a cleaned path)."""
    import posixpath

    return posixpath.normpath(mount.split(":")[1]).replace("//", "/")


# modes whose trainer and rollout own separate devices (TRAINER_GPUS / ROLLOUT_GPUS)
SPLIT_MODES = ("one-step-off", "separate-async", "fully-async")
# the modes of verl's V1 trainer that run asynchronously (verl/trainer/ppo/v1/, 0.9.0+)
V1_ASYNC_MODES = ("colocate-async", "separate-async")


def _is_number_field(annotation: object) -> bool:
    """int, float, or Optional of either (bool is a subclass of int, so it is named apart)."""
    import types
    import typing

    union = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    return any(kind in (int, float) for kind in (typing.get_args(annotation) if union else (annotation,)))


class RunSpec(BaseModel):
    """The resolved run. Frozen: a change (e.g. a feature added on OOM) makes a new spec."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # what and how
    mode: Mode = spec_field("dapo", flags="--mode", panel="Run", view="Run", summary="training", config="run",
        help=("dapo (colocated, sync; every release) | one-step-off (separate trainer/rollout devices; every "
              "release) | colocate-async | separate-async (verl 0.9.0+, the V1 trainer) | fully-async (verl 0.7.1+, "
              "verl.experimental.fully_async_policy). `verl-deploy features` lists them per release."))
    algorithm: Algorithm = spec_field("dapo", flags="--algorithm", panel="Run", view="Run", summary="training",
        description=("dapo (dynamic sampling, overlong buffer, clip-higher) or grpo (as verl's own GRPO example "
                     "scripts: KL loss, symmetric clip, naive reward)"),
        help=("dapo (default) | grpo (as verl's GRPO example scripts: KL loss, symmetric clip, no dynamic sampling "
              "or overlong buffer)."))
    # deciding where verl has the choice (mode dapo, algorithm dapo, 0.9.0+): the header shows mode and algorithm
    dapo_source: Optional[Literal["core", "recipe"]] = spec_field(
        None, flags="--dapo-source", panel="Run", view="Run", summary="training", deciding=True,
        when={"mode": ["dapo"], "algorithm": ["dapo"]}, since="0.9.0",
        description=("verl >= 0.9.0: DAPO from verl's core trainer (main_ppo, V1) or the verl-recipe trainer; "
                     "default: core on 0.9.0+ (recipe below 0.9.0, where verl has only the recipe)"),
        help="verl 0.9.0+: core (verl.trainer.main_ppo, V1 trainer) (default) | recipe (the verl-recipe DAPO trainer).")
    framework: Framework = spec_field(
        "megatron", flags="--framework", env="FRAMEWORK", panel="Run", view="Run", summary="training", config="run",
        help="megatron (default) | fsdp.")
    device: Device = spec_field(
        "npu", flags="--device", panel="Run", view="Run", summary="hardware", config="hardware",
        help="npu (default) | gpu.")
    npu_type: Literal["a2", "a3"] = spec_field("a2", flags="--npu-type", panel="Run", view="Run",
        description="Ascend A2 (910B) or A3 (two chips per NPU): picks the image",
        help="a2 (910B, default) | a3: which official image (check detects it).")
    verl_version: str = spec_field(
        DEFAULT_VERL_VERSION, flags="--verl-version", panel="Run", view="Run", summary="training", config="run",
        help="Target verl version (default: read from --verl-dir / --run-dir when given, else 0.7.0).")
    verl_dir: Optional[str] = spec_field(None, flags="--verl-dir", panel="Run", view="Run",
        description="verl checkout on this host to read version and configs from",
        help="A verl checkout on this host: version and configs are read from it.")
    run_dir: str = spec_field("/verl", flags="--run-dir", panel="Run", view="Run", deciding=True,
        description="verl source root where the training runs (in the container)",
        help="verl source root where training runs (default /verl).")

    # paths
    model_path: str = spec_field(
        "/mnt/public/models/Qwen3-8B", flags="--model-path", env="MODEL_PATH", panel="Paths", view="Paths",
        summary="paths", config="paths", deciding=True,
        help="HuggingFace model directory.")
    train_file: str = spec_field(
        "/mnt/public/data/dapo-math-17k.parquet", flags="--train-file", env="TRAIN_FILE", panel="Paths", view="Paths",
        summary="paths", config="paths", deciding=True,
        help="Training parquet.")
    test_file: str = spec_field(
        "/mnt/public/data/aime-2024.parquet", flags=("--test-file", "--val-file"), env=("VAL_FILE", "TEST_FILE"),
        panel="Paths", view="Paths", summary="paths", config="paths", deciding=True,
        help="Validation parquet.")
    ckpts_dir: Optional[str] = spec_field(
        None, flags="--ckpts-dir", env="CKPTS_DIR", panel="Paths", view="Paths", summary="paths", config="paths",
        deciding=True,
        help="Checkpoint directory.")
    prompt_key: str = spec_field("prompt", view="Paths", config="paths")

    # hardware and cluster
    devices: list[int] = spec_field(
        default_factory=lambda: list(range(8)), flags=("--devices", "--npu-devices"), panel="Hardware",
        view="Hardware", summary="hardware", config="hardware", deciding=True,
        help="Device ids, e.g. 0,1,2,3 or 0-7.")
    nnodes: int = spec_field(
        1, ge=1, le=1024, flags="--nnodes", panel="Hardware", view="Hardware", summary="hardware", config="hardware",
        deciding=True, follows={"config": "start"},
        help="Number of nodes.")
    nodes: list[str] = spec_field(
        default_factory=list, flags="--nodes", panel="Hardware", view="Hardware", summary="hardware",
        description="hosts of a multi-node run, the head first (SSH names)",
        help=("Hosts of a multi-node run, head first: h1,h2 or @hostfile (SSH names; launch starts the workers over "
              "SSH)."))
    master_addr: str = spec_field(
        "127.0.0.1", flags="--master-addr", panel="Hardware", view="Hardware", summary="hardware", config="hardware",
        follows={"config": "start"},
        help="Address of the Ray head.")
    head_from_scheduler: bool = spec_field(False, view="Hardware", config="hardware",
        description=("Slurm / KubeRay / a running Ray cluster give the head: its address comes at run time, not "
                     "from master_addr"))
    ray_port: int = spec_field(6379, ge=1, le=65535, view="Hardware", config="hardware")
    ray_auth: Optional[Literal["token", "disabled"]] = spec_field(
        None, flags="--ray-auth", env="RAY_AUTH_MODE", panel="Hardware", view="Hardware",
        description=("Ray token authentication of the Ray the scripts start and join (RAY_AUTH_MODE); default: as "
                     "Ray 2.60's `ray start --head` decides on this host (token when a Ray token is found)"),
        help=("token | disabled: Ray token authentication for the Ray the scripts start and join (default: "
              "RAY_AUTH_MODE, else token when a Ray token is found: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, "
              "~/.ray/auth_token)."))
    socket_ifname: Optional[str] = spec_field(
        None, flags="--socket-ifname", panel="Hardware", view="Hardware", summary="hardware", config="hardware",
        help="Network interface for HCCL/NCCL/GLOO.")
    container: Optional[str] = spec_field(
        None, flags="--container", env="CONTAINER", panel="Hardware", view="Run", summary="container",
        config="container", deciding=True,
        help="Container the run uses.")
    image: str = spec_field(
        DEFAULT_IMAGE, flags="--image", panel="Hardware", view="Run", summary="container", config="container",
        deciding=True,
        description="default: the official image of verl_version x device (images.py)",
        help=("Image for a new container (default: the official image of the verl version and device, see README "
              "'Official images')."))
    image_file: Optional[str] = spec_field(None, flags="--image-file", panel="Hardware", view="Run", summary="container",
        description="image tarball to `docker load` when the image is not local",
        help=("Image tarball (`docker save` output) loaded with `docker load` when the image is not on this host: "
              "no registry needed."))
    pull_timeout: int = spec_field(1800, ge=1, le=86_400, flags="--pull-timeout", panel="Hardware", view="Run",
        description="seconds a `docker pull` may take",
        help="Seconds a `docker pull` may take (default 1800).")
    mounts: list[str] = spec_field(default_factory=list, flags="--mount", panel="Hardware", repeat=True, view="Run",
        summary="container",
        description="extra HOST:CONTAINER[:ro] binds for a new container",
        help="Extra bind for a new container, HOST:CONTAINER[:ro]; repeatable (data, models, code).")
    http_proxy: Optional[str] = spec_field(
        None, flags="--http-proxy", env="http_proxy", panel="Hardware", view="Run", summary="container",
        config="container",
        round="proxy", ask="http_proxy",
        description="proxy for a new container and pip inside it",
        help="Proxy for a new container and pip in it.")
    https_proxy: Optional[str] = spec_field(
        None, flags="--https-proxy", env="https_proxy", panel="Hardware", view="Run", summary="container",
        config="container",
        round="proxy", ask="https_proxy",
        help="HTTPS proxy for a new container and pip in it.")
    device_memory_gb: Optional[float] = spec_field(
        None, gt=0, le=4096, flags="--device-memory-gb", panel="Hardware", view="Hardware",
        description="memory of one device in GiB (detected from npu-smi/nvidia-smi, else the device name's default)",
        help=("Memory of one device in GiB for the memory estimate (default: what check found, else the device "
              "name's default, e.g. 64 for 910B3, 80 for H100)."))
    device_name: Optional[str] = spec_field(
        None, max_length=100, flags="--device-name", panel="Hardware", view="Hardware", deciding=True,
        follows={"view": "rollout_gpus"},
        description="accelerator model, e.g. 910B3 or H100",
        help=("Accelerator model for the memory estimate's default memory when none is detected: 910B1-910B4, A3, "
              "H100, H800, H20, H200, A100-40GB, A100, A800, L20, RTX 4090, RTX A6000."))
    nccl_version: Optional[str] = spec_field(
        None, max_length=20, flags="--nccl-version", panel="Hardware", view="Hardware",
        description="NCCL release the training runs with (detected by check: nvidia-nccl-cu12, else torch's pin)",
        help=("NCCL release the training's torch uses, e.g. 2.21.5, for the memory estimate's communicator buffers "
              "(default: what check found, else the release image's: NCCL 2.26+ sets buffers up on first use, "
              "NCCL 2.21 (torch 2.5/2.6) all at init, ~1.9 GiB per 8-GPU communicator on NVSwitch hosts)."))
    host_memory_gb: Optional[float] = spec_field(None, gt=0, le=1_000_000, view="Hardware", config="hardware",
        description="host RAM per node in GiB")

    # hyper-parameters
    # None: verl's own count, total_epochs x batches per epoch (trainer.total_training_steps: null)
    train_steps: Optional[int] = spec_field(
        100, ge=1, le=10_000_000, flags="--train-steps", env="TRAIN_STEPS", panel="Hyper-parameters",
        view="Hyper-parameters", summary="training", config="hyper-parameters", deciding=True,
        round="hyper-parameters", ask="Training steps",
        help="Training steps (default 100).")
    batch_size: int = spec_field(
        32, ge=1, le=1_000_000, flags="--batch-size", panel="Hyper-parameters", view="Hyper-parameters",
        summary="training", config="hyper-parameters", deciding=True,
        round="hyper-parameters", ask="Batch size (prompts per step)",
        help="Prompts per step (default 32).")
    mini_batch_size: Optional[int] = spec_field(
        None, ge=1, le=1_000_000, flags="--mini-batch-size", panel="Hyper-parameters", view="Hyper-parameters",
        help="PPO mini-batch (default = batch size).")
    gen_batch_size: Optional[int] = spec_field(
        None, ge=1, le=10_000_000, flags="--gen-batch-size", panel="Hyper-parameters", view="Hyper-parameters",
        deciding=True,
        help="DAPO generation batch (default 3 x batch).")
    lr: float = spec_field(
        1e-6, gt=0, le=1.0, flags="--lr", panel="Hyper-parameters", view="Hyper-parameters", summary="training",
        config="hyper-parameters", deciding=True,
        round="hyper-parameters", ask="Learning rate",
        help="Learning rate (default 1e-6).")
    n_resp_per_prompt: int = spec_field(
        8, ge=1, le=1024, flags="--n-resp-per-prompt", panel="Hyper-parameters", view="Hyper-parameters",
        summary="training", config="hyper-parameters", deciding=True,
        round="hyper-parameters", ask="Responses per prompt",
        help="Responses per prompt (default 8).")
    max_prompt_length: int = spec_field(
        2048, ge=16, le=1_048_576, flags="--max-prompt-length", panel="Hyper-parameters", view="Hyper-parameters",
        summary="training", config="hyper-parameters", deciding=True,
        round="hyper-parameters", ask="Max prompt length",
        help="Default 2048.")
    max_response_length: int = spec_field(
        8192, ge=16, le=1_048_576, flags="--max-response-length", env="MAX_RESPONSE_LENGTH", panel="Hyper-parameters",
        view="Hyper-parameters", summary="training", config="hyper-parameters", deciding=True,
        round="hyper-parameters", ask="Max response length",
        help="Default 8192.")
    expected_response_length: Optional[int] = spec_field(
        None, ge=1, le=1_048_576, flags="--expected-response-length", panel="Hyper-parameters",
        view="Hyper-parameters",
        help="The mean response length the run is expected to reach (DAPO logs response_length/mean): the memory "
             "estimate sizes the typical step with it (default: half the maximum).")
    temperature: float = spec_field(
        1.0, ge=0, le=10, flags="--temperature", panel="Hyper-parameters", view="Hyper-parameters",
        help="Rollout sampling temperature (default 1.0).")
    clip_ratio_low: float = spec_field(
        0.2, ge=0, le=1, flags="--clip-ratio-low", panel="Hyper-parameters", view="Hyper-parameters",
        help="PPO clip below (default 0.2).")
    clip_ratio_high: float = spec_field(
        0.28, ge=0, le=10, flags="--clip-ratio-high", panel="Hyper-parameters", view="Hyper-parameters",
        help="PPO clip above, DAPO's clip-higher (default 0.28).")
    # token-sum: verl 0.9.0+ only (rules/lengths.py loss_agg_mode_in_release)
    loss_agg_mode: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm",
                           "token-sum"] = spec_field(
        "token-mean", flags="--loss-agg-mode", panel="Hyper-parameters", view="Hyper-parameters",
        help=("token-mean (default) | seq-mean-token-sum | seq-mean-token-mean | seq-mean-token-sum-norm | "
              "token-sum (verl 0.9.0+)."))
    filter_groups: bool = spec_field(
        True, flags="--filter-groups", panel="Hyper-parameters", view="Hyper-parameters", yes_no=True,
        help="yes | no: DAPO's dynamic sampling, drop groups whose responses all score alike (default yes).")
    # None (null) is refused by the rules when group filtering is on: the trainer reads the metric by name
    filter_groups_metric: Optional[str] = spec_field(
        "acc", flags="--filter-groups-metric", panel="Hyper-parameters", view="Hyper-parameters",
        help="Metric the groups are filtered on (default acc).")
    max_num_gen_batches: int = spec_field(
        10, ge=0, flags="--max-num-gen-batches", panel="Hyper-parameters", view="Hyper-parameters",
        help="Generation batches a step may take to fill the train batch (default 10; 0 no limit).")
    overlong_buffer: bool = spec_field(
        True, flags="--overlong-buffer", panel="Hyper-parameters", view="Hyper-parameters", yes_no=True,
        help="yes | no: DAPO's overlong penalty (default yes).")
    overlong_buffer_len: Optional[int] = spec_field(
        None, ge=1, flags="--overlong-buffer-len", panel="Hyper-parameters", view="Hyper-parameters",
        help="Tokens before the maximum where the penalty starts (default: a quarter of the response length).")
    overlong_penalty_factor: float = spec_field(
        1.0, ge=0, flags="--overlong-penalty-factor", panel="Hyper-parameters", view="Hyper-parameters",
        help="Penalty at the maximum length (default 1.0).")

    # parallelism
    train_tp: int = spec_field(
        4, ge=1, le=1024, flags="--train-tp", panel="Parallelism", view="Parallelism", summary="layout",
        config="hyper-parameters", deciding=True, follows={"config": "lr", "round": "lr"}, round="hyper-parameters",
        ask="Tensor parallel (TP)",
        help="Training tensor parallel (default 4).")
    train_pp: int = spec_field(
        2, ge=1, le=1024, flags="--train-pp", panel="Parallelism", view="Parallelism", summary="layout",
        config="hyper-parameters", deciding=True, follows={"config": "lr", "round": "lr"}, round="hyper-parameters",
        ask="Pipeline parallel (PP)",
        help="Training pipeline parallel (default 2).")
    train_cp: int = spec_field(
        1, ge=1, le=1024, flags="--train-cp", panel="Parallelism", view="Parallelism", summary="layout",
        help="Training context parallel (default 1).")
    gen_tp: Optional[int] = spec_field(
        None, ge=1, le=1024, flags="--gen-tp", panel="Parallelism", view="Parallelism", summary="layout",
        deciding=True,
        round="hyper-parameters", ask="Rollout tensor parallel (vLLM TP)", follows={"round": "lr"},
        help="Rollout tensor parallel (default = train TP).")
    allow_tp_mismatch: bool = spec_field(False, flags="--allow-tp-mismatch", panel="Parallelism", view="Parallelism",
        help="Allow --gen-tp to differ from --train-tp.")
    trainer_gpus: int = spec_field(
        4, ge=1, le=100_000, flags="--trainer-gpus", env="TRAINER_GPUS", panel="Hardware", view="Hardware",
        summary="layout", config="run", follows={"view": "socket_ifname"}, deciding=True, when={"mode": SPLIT_MODES},
        help="one-step-off, separate-async, fully-async: trainer devices (default 4).")
    rollout_gpus: int = spec_field(
        4, ge=1, le=100_000, flags="--rollout-gpus", env="ROLLOUT_GPUS", panel="Hardware", view="Hardware",
        summary="layout", config="run", follows={"view": "socket_ifname"}, deciding=True, when={"mode": SPLIT_MODES},
        help="one-step-off, separate-async, fully-async: rollout devices (default 4).")
    # asynchronous modes (verl >= 0.9.0 V1 trainer; fully-async: verl.experimental.fully_async_policy)
    parameter_sync_step: Optional[int] = spec_field(
        None, ge=1, le=1_000_000, flags="--parameter-sync-step", panel="Run", follows={"panel": "dapo_source"},
        view="Async", summary="training", deciding=True, when={"mode": ["separate-async", "fully-async"]},
        description=("separate-async / fully-async: mini-batches trained between weight syncs (default: batch / "
                     "mini-batch)"),
        help="separate-async, fully-async: mini-batches between weight syncs (default: batch / mini-batch).")
    warmup_batches: int = spec_field(
        1, ge=0, le=1024, flags="--warmup-batches", panel="Run", follows={"panel": "dapo_source"},
        view="Async", summary="training", deciding=True, when={"mode": V1_ASYNC_MODES},
        description="colocate-/separate-async: batches queued before training",
        help="colocate-/separate-async: batches queued before training (default 1).")
    max_off_policy: int = spec_field(
        8, ge=1, le=1_000_000, flags="--max-off-policy", panel="Run", follows={"panel": "dapo_source"},
        view="Async", summary="training", deciding=True, when={"mode": V1_ASYNC_MODES},
        description="V1 async: model versions a trajectory may span",
        help="V1 async: model versions a trajectory may span (default 8).")
    off_policy_strategy: Literal["drop", "wait"] = spec_field(
        "drop", flags="--off-policy-strategy", panel="Run", follows={"panel": "dapo_source"},
        view="Async", summary="training", deciding=True, when={"mode": V1_ASYNC_MODES},
        help="V1 async: drop (default) | wait.")
    # no flag (set in the config file, `run` section): fully-async's own settings, at verl's defaults
    staleness_threshold: float = spec_field(
        0.1, ge=0, le=1_000, view="Async", summary="training", config="run", deciding=True,
        when={"mode": ["fully-async"]}, description="fully-async: stale samples allowed per sync")
    partial_rollout: bool = spec_field(
        True, view="Async", summary="training", config="run", deciding=True, when={"mode": ["fully-async"]},
        description=("fully-async: samples in generation when weights sync are interrupted and go on after it "
                     "(with staleness_threshold > 0)"))

    # rollout engine
    rollout_engine: Literal["vllm", "sglang"] = spec_field(
        "vllm", flags="--rollout-engine", panel="Hyper-parameters", view="Parallelism", deciding=True,
        help="vllm (default) | sglang.")
    gpu_memory_utilization: float = spec_field(
        0.6, gt=0, le=0.99, flags="--gpu-memory-utilization", panel="Hyper-parameters", view="Parallelism",
        deciding=True,
        help="Share of device memory the rollout engine takes (default 0.6).")

    # checkpoints and validation
    save_freq: int = spec_field(
        10, ge=-1, flags="--save-freq", panel="Hyper-parameters", view="Hyper-parameters", summary="training",
        follows={"panel": "max_response_length"},
        help="Checkpoint every N steps (default 10; 0 or -1 off).")
    test_freq: int = spec_field(10, ge=-1, flags="--test-freq", panel="Hyper-parameters", view="Hyper-parameters",
        follows={"panel": "max_response_length"},
        help="Validate every N steps (default 10; 0 or -1 off).")
    val_before_train: bool = spec_field(
        False, flags="--val-before-train", panel="Hyper-parameters", view="Hyper-parameters", yes_no=True,
        follows={"panel": "max_response_length"},
        help="yes | no: validate before the first step (default no).")
    # None: keep every checkpoint (verl's default, trainer.max_actor_ckpt_to_keep: null)
    max_ckpt_to_keep: Optional[int] = spec_field(
        2, ge=1, flags="--max-ckpt-to-keep", panel="Hyper-parameters", view="Hyper-parameters",
        follows={"panel": "max_response_length"},
        help="Checkpoints kept (default 2).")

    # features
    mask: Optional[str] = spec_field(None, flags="--mask", panel="Features", view="Features", config="features",
        help=("7-bit feature mask RmvPad DynBSZ Offload PfxCache Recompute SwapOpt VPP, leftmost = bit 0, e.g. "
              "1100000."))
    # how the recompute feature recomputes (Megatron): verl's large-model scripts use uniform, 1 layer
    recompute_method: Literal["block", "uniform"] = spec_field(
        "block", flags="--recompute-method", panel="Features", view="Features",
        help="block (default) | uniform: how the recompute feature recomputes (Megatron).")
    recompute_num_layers: int = spec_field(
        8, ge=1, le=1024, flags="--recompute-num-layers", panel="Features", view="Features",
        help="Layers the recompute feature recomputes: per stage (block) or per chunk (uniform); default 8.")
    features: list[str] = spec_field(
        default_factory=list, flags="--features", env="USER_FEATURES", panel="Features", view="Features",
        config="features", follows={"panel": "mask", "view": "mask"},
        help="Features to turn on, comma separated; -name turns one off.")
    no_default_features: bool = spec_field(
        False, flags="--no-default-features", panel="Features", view="Features", config="features",
        follows={"panel": "mask"},
        help="Start with every feature off.")
    oom_features: list[str] = spec_field(default_factory=list, view="Features")
    estimate_features: list[str] = spec_field(
        default_factory=list, view="Features", follows={"view": "no_default_features"},
        description="memory features launch added because the memory estimate said the plan does not fit")
    max_oom_retries: int = spec_field(
        2, ge=0, le=10, flags="--max-oom-retries", env="MAX_OOM_RETRIES", panel="Features", view="Features",
        help="OOM retries with memory features (default 2).")

    # logging
    swanlab: Optional[bool] = spec_field(
        None, flags="--swanlab", panel="SwanLab", view="Logging", summary="swanlab", config="swanlab", yes_no=True,
        round="swanlab", ask="Log to SwanLab?",
        help="yes | no: log to SwanLab (default: yes when a host is set).")
    swanlab_host: Optional[str] = spec_field(
        None, flags="--swanlab-host", env="SWANLAB_HOST", panel="SwanLab", view="Logging", summary="swanlab",
        config="swanlab",
        round="swanlab", ask="SwanLab host (e.g. http://10.0.0.1:8000)",
        help="e.g. http://10.0.0.1:8000.")
    swanlab_api_key: Optional[SecretStr] = spec_field(
        None, flags="--swanlab-api-key", env="SWANLAB_API_KEY", panel="SwanLab", view="Logging", summary="swanlab",
        secret=True,
        round="swanlab", ask="SwanLab API key (hidden)",
        help=("'-' reads it from stdin (preferred: SWANLAB_API_KEY in the environment; argv is visible to other "
              "users)."))
    swanlab_mode: Literal["cloud", "local", "offline", "disabled"] = spec_field(
        "cloud", flags="--swanlab-mode", env="SWANLAB_MODE", panel="SwanLab", view="Logging", summary="swanlab",
        config="swanlab",
        round="swanlab", ask="SwanLab mode",
        help="cloud (default) | local.")
    swanlab_workspace: str = spec_field(
        "TrainingMaster", flags="--swanlab-workspace", env="SWANLAB_WORKSPACE", panel="SwanLab", view="Logging",
        summary="swanlab", config="swanlab",
        round="swanlab", ask="Workspace",
        help="Default TrainingMaster.")
    swanlab_log_dir: Optional[str] = spec_field(
        None, flags="--swanlab-log-dir", env="SWANLAB_LOG_DIR", panel="SwanLab", view="Logging", summary="swanlab",
        config="swanlab",
        round="swanlab", ask="Log directory",
        description="SwanLab log directory (default: swanlog/ under the run directory)",
        help="SwanLab log directory.")
    # verl's trainer.logger (profiles/trackers.py); empty: console, plus swanlab when SwanLab is on
    logger: list[str] = spec_field(
        default_factory=list, flags="--logger", panel="SwanLab", view="Logging", deciding=True,
        follows={"view": "start"},
        help=("Trackers verl logs to, comma separated: console, wandb, swanlab, mlflow, tensorboard, clearml, file, "
              "vemlp_wandb (default console, + swanlab when on). Credentials come from the environment or "
              "trackers.env, never flags."))
    project_name: str = spec_field(
        "verl_hlm", flags="--project-name", env="PROJECT_NAME", panel="SwanLab", view="Logging", summary="swanlab",
        config="swanlab",
        round="swanlab", ask="Project name",
        help="Default verl_hlm.")
    experiment_name: Optional[str] = spec_field(
        None, flags="--experiment-name", panel="SwanLab", view="Logging", deciding=True,
        help="Default <mode>-<model>-<framework>-<device>.")

    # anything else, checked against verl's config
    overrides: list[str] = spec_field(default_factory=list, flags=("--override", "-o"), panel="Input", view="Extra",
        repeat=True,
        help="Any verl key, Hydra syntax: KEY=VALUE (repeatable; checked against verl's config).")
    strict: bool = spec_field(False, flags="--strict", panel="Input", view="Extra",
        help="Missing paths and unchecked overrides are errors.")
    nearest_profile: bool = spec_field(
        False, flags="--nearest-profile", panel="Run", view="Extra", follows={"panel": "verl_dir"},
        help=("Plan a verl release this tool has no profile for (e.g. a main checkout, 0.10.0.dev) with the newest "
              "older profile; verl's own validation then runs."))

    # where each value came from: field -> default|detected|file|env|flag|answer|derived
    sources: dict[str, str] = Field(default_factory=dict, exclude=True)

    @model_validator(mode="before")
    @classmethod
    def _default_image(cls, data: object) -> object:
        """No image given: the official one for this verl release and device (images.py), not 0.7.0's NPU image."""
        if isinstance(data, dict) and data.get("image") is None:
            from verl_deploy.images import default_image

            version = str(data.get("verl_version") or DEFAULT_VERL_VERSION).strip().lstrip("v")
            device = str(data.get("device") or "npu").strip().lower()
            npu_type = str(data.get("npu_type") or "a2").strip().lower()
            data = {**data, "image": default_image(version, device, npu_type if npu_type in ("a2", "a3") else "a2")}
        return data

    @model_validator(mode="before")
    @classmethod
    def _logger_override(cls, data: object) -> object:
        """`-o trainer.logger=[console,wandb]` is read as `--logger console,wandb` (so checks, the trackers'
        environment and the scripts all work from it); with --logger given too, the override stays and is refused."""
        if not isinstance(data, dict) or data.get("logger") or not isinstance(data.get("overrides"), (list, tuple)):
            return data
        from verl_deploy.profiles.trackers import LOGGER_OVERRIDE

        kept, lifted = [], None
        for text in data["overrides"]:
            match = LOGGER_OVERRIDE.match(str(text).strip()) if isinstance(text, str) else None
            value = match.group(1).strip().strip("'\"") if match else ""
            well_formed = (value.startswith("[") and value.endswith("]")) or not any(c in value for c in "[],")
            if match and lifted is None and well_formed:  # a,b is a sweep, [a a Hydra error: both refused later
                lifted = [part.strip().strip("'\"") for part in value.strip("[]").split(",")]
            else:
                kept.append(text)
        if lifted is None:
            return data
        sources = {**(data.get("sources") or {}), "logger": "flag --override"}
        return {**data, "overrides": kept, "logger": [n for n in lifted if n], "sources": sources}

    @model_validator(mode="before")
    @classmethod
    def _algorithm_defaults(cls, data: object) -> object:
        """GRPO as verl's own GRPO example scripts run it: no dynamic sampling, no overlong buffer, symmetric
        clipping (profiles/algorithms.py). Only values the user left unset change."""
        if isinstance(data, dict) and str(data.get("algorithm") or "dapo").strip().lower() == "grpo":
            from verl_deploy.profiles.algorithms import GRPO_SPEC_DEFAULTS

            given = {k: v for k, v in data.items() if v is not None or k not in GRPO_SPEC_DEFAULTS}
            filled = {name: "default of --algorithm grpo (verl's GRPO scripts)" for name in GRPO_SPEC_DEFAULTS
                      if name not in given and GRPO_SPEC_DEFAULTS[name] != cls.model_fields[name].default}
            data = {**GRPO_SPEC_DEFAULTS, **given, "sources": {**filled, **(data.get("sources") or {})}}
        return data

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_for_numbers(cls, value: object, info) -> object:
        """pydantic reads True as 1 for int and float fields: YAML's yes/on/true would be a step count of 1."""
        if isinstance(value, bool) and _is_number_field(cls.model_fields[info.field_name].annotation):
            name, default = info.field_name, cls.model_fields[info.field_name].default
            example = f", e.g. {name}: {default}" if isinstance(default, (int, float)) else ""
            raise names.NameProblem(f"a yes/no value ({str(value).lower()}), not a number",
                                    f"write a number{example} (YAML reads yes/no/on/off/true/false as yes/no)")
        return value

    @field_validator("devices", mode="before")
    @classmethod
    def _devices(cls, value: object) -> list[int]:
        return parse_devices(value)

    @field_validator("nodes", mode="before")
    @classmethod
    def _hosts(cls, value: object) -> list[str]:
        return parse_hosts(value)

    @field_validator("features", "overrides", "oom_features", "estimate_features", mode="before")
    @classmethod
    def _string_list(cls, value: object) -> list[str]:
        if value is None:
            return []
        if isinstance(value, str):
            return [value]
        if not isinstance(value, (list, tuple)):
            raise ValueError(f"expected a list of names or a comma-separated string, got a {type(value).__name__}")
        if len(value) > 1000:
            raise ValueError(f"{len(value)} entries; at most 1000")
        for item in value:
            if not isinstance(item, (str, int, float)) or isinstance(item, bool):
                raise ValueError(f"entries must be text, got a {type(item).__name__}: {str(item)[:40]!r}")
        return [str(v) for v in value]

    @field_validator("mounts", mode="before")
    @classmethod
    def _mounts(cls, value: object) -> list[str]:
        mounts = [parse_mount(item) for item in cls._string_list(value)]
        seen: dict[str, str] = {}
        for mount in mounts:
            where = mount_destination(mount)
            if where in seen:
                raise names.NameProblem(f"{seen[where]!r} and {mount!r} both mount at {where} in the container "
                                        "(docker refuses a duplicate mount point)",
                                        "give each --mount its own container path")
            seen[where] = mount
        return mounts

    @field_validator("overrides")
    @classmethod
    def _hydra_overrides(cls, value: list[str]) -> list[str]:
        from verl_deploy.hydra_text import parse_override

        from verl_deploy.secrets import secret_interpolation

        for text in value:
            parse_override(text)  # Hydra's own grammar; OverrideSyntaxError says how to fix it
            name = secret_interpolation(text)
            if name:  # verl prints its resolved config at start: the secret would be in the training log
                raise names.NameProblem(
                    f"{text.split('=', 1)[0]} reads the secret {name} through an interpolation; verl prints its "
                    "resolved config, so the secret would be written to the training log",
                    "never pass a secret through an override: the SwanLab key reaches the trainer only through "
                    "swanlab.env (`verl-deploy swanlab login`, or SWANLAB_API_KEY)")
        return value

    @field_validator("ray_auth", mode="before")
    @classmethod
    def _ray_auth(cls, value: object) -> object:
        """Ray reads RAY_AUTH_MODE case-insensitively."""
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("logger", mode="before")
    @classmethod
    def _loggers(cls, value: object) -> list[str]:
        from verl_deploy.profiles.trackers import OFFERED

        if value is None:
            return []
        items = value.split(",") if isinstance(value, str) else value
        if not isinstance(items, (list, tuple)):
            raise ValueError(f"expected tracker names separated by commas, got a {type(value).__name__}")
        names = [str(item).strip().lower() for item in items if str(item).strip()]
        unknown = [n for n in names if n not in OFFERED]
        if unknown:
            raise ValueError(f"{', '.join(unknown)} is not a tracker verl-deploy sets up (one of: {', '.join(OFFERED)})")
        return list(dict.fromkeys(names))

    @field_validator("swanlab_mode", mode="before")
    @classmethod
    def _swanlab_mode(cls, value: object) -> object:
        """swanlab >= 0.8 calls the cloud mode `online` (and maps `cloud` to it): accept both spellings."""
        if isinstance(value, str) and value.strip().lower() in ("online", "cloud"):
            return "cloud"
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("verl_version")
    @classmethod
    def _version(cls, value: str) -> str:
        value = value.strip().lstrip("v")
        if not re.fullmatch(r"\d+\.\d+(\.\d+)?([.\-+]?\w+)*", value):
            raise ValueError(f"{value!r} is not a version like 0.7.0")
        return value

    @field_validator("nccl_version")
    @classmethod
    def _nccl_version(cls, value: Optional[str]) -> Optional[str]:
        if value is None:
            return None
        value = value.strip()
        if not re.fullmatch(r"\d+\.\d+(\.\d+)?", value):
            raise ValueError(f"{value!r} is not an NCCL release like 2.21.5 (in the training's environment, python -c "
                             f"'import torch; print(torch.cuda.nccl.version())' prints it as (2, 21, 5))")
        return value

    @field_validator("model_path", "train_file", "test_file", "ckpts_dir", "run_dir", "swanlab_log_dir", "verl_dir")
    @classmethod
    def _path(cls, value: Optional[str], info) -> Optional[str]:
        return None if value is None else names.path(value, info.field_name.replace("_", " "))

    @field_validator("project_name", "experiment_name", "prompt_key", "swanlab_workspace", "filter_groups_metric")
    @classmethod
    def _label(cls, value: Optional[str], info) -> Optional[str]:
        return None if value is None else names.label(value, info.field_name.replace("_", " "))

    @field_validator("project_name", "experiment_name")
    @classmethod
    def _directory_name(cls, value: Optional[str], info) -> Optional[str]:
        """verl saves to checkpoints/PROJECT/EXPERIMENT: each must be one directory name inside that root."""
        return None if value is None else names.path_segment(value, info.field_name.replace("_", " "))

    @field_validator("container")
    @classmethod
    def _container(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else names.container_name(value)

    @field_validator("image")
    @classmethod
    def _image(cls, value: str) -> str:
        return names.image_reference(value)

    @field_validator("master_addr")
    @classmethod
    def _master_addr(cls, value: str) -> str:
        return names.host_name(value, "master address")

    @field_validator("socket_ifname")
    @classmethod
    def _ifname(cls, value: Optional[str]) -> Optional[str]:
        return None if value is None else names.interface_names(value)

    @field_validator("swanlab_host", "http_proxy", "https_proxy")
    @classmethod
    def _url(cls, value: Optional[str], info) -> Optional[str]:
        return None if value is None else names.url(value, info.field_name.replace("_", " "))

    @field_validator("mask")
    @classmethod
    def _mask(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not value.strip():
            raise names.NameProblem("the mask is empty", "give 7 characters of 0/1, e.g. --mask 1100000, "
                                    "or leave --mask out for the default features")
        return value

    @field_validator("swanlab_api_key")
    @classmethod
    def _key(cls, value: Optional[SecretStr]) -> Optional[SecretStr]:
        if value is None:
            return None
        key = value.get_secret_value()
        if not key.strip():
            raise names.NameProblem("the SwanLab API key is empty", "give the key from your SwanLab settings "
                                    "page in SWANLAB_API_KEY, or turn SwanLab off with --swanlab no")
        if re.search(r"[\s\x00-\x1f\x7f]", key) or len(key) > 1024:
            raise names.NameProblem("the SwanLab API key contains spaces or control characters (or is over 1024 "
                                    "characters)", "copy the key again, without surrounding spaces or a newline")
        return value

    @field_validator("features")
    @classmethod
    def _features_once(cls, value: list[str]) -> list[str]:
        wanted: dict[str, bool] = {}
        for item in value:
            if not item.strip(" ,"):
                raise names.NameProblem("no feature named", "name features, e.g. --features offload,-flash_attn, "
                                        "or leave --features out for the defaults")
            for part in (p.strip() for p in item.split(",")):
                name, on = (part[1:], False) if part.startswith("-") else (part.lstrip("+"), True)
                if not name:
                    continue
                if wanted.get(name, on) != on:
                    raise names.NameProblem(f"feature {name} is both turned on and off",
                                            f"name {name} once: {name} to turn it on, -{name} to turn it off")
                wanted[name] = on
        return value

    @field_validator("*", mode="before")
    @classmethod
    def _bounded(cls, value: object, info) -> object:
        """Every text is bounded before any other check reads it."""
        if isinstance(value, str) and len(value) > 2 * names.PATH_MAX and info.field_name != "overrides":
            raise names.NameProblem(f"{len(value)} characters; at most {2 * names.PATH_MAX}", "shorten the value")
        for text in (value if isinstance(value, (list, tuple)) else [value]):
            names.utf8(text)  # a byte that is not UTF-8 (from argv or the environment) cannot reach a script
        return value

    # derived values: computed, never stored twice
    @property
    def swanlab_on(self) -> bool:
        """On when the user says so, or gives a host. A key alone (saved by init or `swanlab login`, or an
        SWANLAB_API_KEY kept in the shell for other work) never turns it on."""
        if self.swanlab is not None:
            return self.swanlab
        return bool(self.swanlab_host) or "swanlab" in self.logger

    @property
    def loggers(self) -> list[str]:
        """What verl's trainer.logger gets: --logger (console when empty), with swanlab as --swanlab says."""
        names = [n for n in (self.logger or ["console"]) if n != "swanlab"]
        if self.swanlab_on:
            names.insert(self.logger.index("swanlab") if "swanlab" in self.logger else len(names), "swanlab")
        return names

    @property
    def rollout_tp(self) -> int:
        return self.gen_tp if self.gen_tp is not None else self.train_tp

    @property
    def effective_experiment_name(self) -> str:
        if self.experiment_name:
            return self.experiment_name
        model = re.sub(r"[^A-Za-z0-9._-]+", "_", self.model_path.rstrip("/").rsplit("/", 1)[-1]).strip("_") or "model"
        run = self.mode if self.algorithm == "dapo" else ("grpo" if self.mode == "dapo" else f"{self.mode}-grpo")
        return f"{run}-{model}-{self.framework}-{self.device}"

    @property
    def effective_swanlab_log_dir(self) -> str:
        """Where swanlab writes its files: given, else `swanlog/` under the run directory (where the run writes)."""
        return self.swanlab_log_dir or f"{self.run_dir.rstrip('/')}/swanlog"

    @property
    def effective_ckpts_dir(self) -> str:
        if self.ckpts_dir:
            return self.ckpts_dir
        return f"{self.run_dir.rstrip('/')}/ckpts/{self.project_name}/{self.effective_experiment_name}"

    @property
    def effective_mini_batch_size(self) -> int:
        return self.mini_batch_size or self.batch_size

    @property
    def effective_gen_batch_size(self) -> int:
        if self.gen_batch_size:
            return self.gen_batch_size
        return self.batch_size * 3 if self.filter_groups else self.batch_size

    @property
    def effective_overlong_buffer_len(self) -> int:
        return self.overlong_buffer_len or max(1, self.max_response_length // 4)

    @property
    def token_budget(self) -> int:
        """Max tokens of one sequence: the dynamic-batch budget per device."""
        return self.max_prompt_length + self.max_response_length

    @property
    def trainer_devices(self) -> int:
        """Devices the trainer uses on each node."""
        return self.trainer_gpus if self.mode in SPLIT_MODES else len(self.devices)

    @property
    def effective_parameter_sync_step(self) -> int:
        """separate-async asserts train_batch_size == parameter_sync_step x ppo_mini_batch_size."""
        if self.parameter_sync_step:
            return self.parameter_sync_step
        return max(1, self.batch_size // self.effective_mini_batch_size)

    def derived_values(self) -> dict[str, object]:
        """What an unset field stands for: field -> the value the run derives for it (the properties above);
        a field that means nothing in this run (`applies`) derives nothing."""
        derived = {
            "ckpts_dir": self.effective_ckpts_dir, "mini_batch_size": self.effective_mini_batch_size,
            "gen_batch_size": self.effective_gen_batch_size, "gen_tp": self.rollout_tp,
            "experiment_name": self.effective_experiment_name, "swanlab": self.swanlab_on,
            "overlong_buffer_len": self.effective_overlong_buffer_len,
            "swanlab_log_dir": self.effective_swanlab_log_dir,
            "parameter_sync_step": self.effective_parameter_sync_step,
            # where dapo_source applies (mode and algorithm dapo, verl >= its `since`), profiles/modes.py
            # dapo_source_for runs DAPO from verl's core unless --dapo-source recipe asks for the recipe
            "dapo_source": "core",
        }
        return {name: value for name, value in derived.items() if self.applies(name)}

    def applies(self, name: str) -> bool:
        """Does the field mean something in this run (its declared `when` and `since`, e.g. parameter_sync_step
        only in the modes that sync weights by it)?"""
        meta = DECLARED[name]
        if not meta.when and meta.since is None:
            return True
        return meta.applies({key: getattr(self, key) for key in (*meta.when, "verl_version")})

    def with_changes(self, source: str = "derived", **changes: object) -> "RunSpec":
        """A new spec with some fields changed; the changed fields get `source` as provenance."""
        data = self.model_dump()
        data["swanlab_api_key"] = self.swanlab_api_key
        data.update(changes)
        sources = {**self.sources, **{name: source for name in changes}}
        return RunSpec(**data, sources=sources)




def field_names() -> list[str]:
    return [n for n in RunSpec.model_fields if n != "sources"]


# each field's declaration (flags, env vars, sections, ...: declared.py), in declaration order
DECLARED: dict[str, FieldMeta] = {name: FieldMeta.of(RunSpec.model_fields[name]) for name in field_names()}
SECRET_FIELDS = frozenset(name for name, meta in DECLARED.items() if meta.secret)


def listing(table: str, titles: tuple[str, ...] | None = None) -> list[tuple[str, list[str]]]:
    """[(section, [field])] of one generated listing: `panel` (--help), `view` (plan), `summary` (the
    confirmation), `config` (the file init writes) or `round` (the wizard's), in the order of `titles`."""
    return sections(DECLARED, table, titles)


def env_vars() -> dict[str, str]:
    """Environment variable -> field, lowest priority first (VAL_FILE, then TEST_FILE: the later one wins)."""
    return {variable: name for name, meta in DECLARED.items() for variable in meta.env}


def flag_of(name: str) -> Optional[str]:
    """The flag that sets a field (its declared first flag), or None for the few set only in a config file."""
    return DECLARED[name].flag if name in DECLARED else None


def how_to_set(name: str, value: object = None) -> str:
    """How a user gives a field a value, as a fix names it: its flag (with `value` when given); a field without
    one (there is no `--prompt-key`) is written in a config file, in the section `init` puts it in."""
    flag = flag_of(name)
    if flag is not None:
        return flag if value is None else f"{flag} {value}"
    section = DECLARED[name].config if name in DECLARED else None
    where = f" (its `# -- {section}` section)" if section else ""
    return f"`{name}: {'VALUE' if value is None else value}` in a config file{where} passed with --config FILE"
