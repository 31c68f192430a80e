"""RunSpec: one immutable, fully resolved description of a training run.

Every field has a default here (the seeds' defaults where they give one). Where a
value comes from (default, detected, file, env, flag, answer, derived) is kept beside
it in ``RunSpec.sources`` so that `plan` and the confirmation can show it.
Cross-field rules live in ``checks.py``; this module only knows single fields.
"""

from __future__ import annotations

import re
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from verl_deploy import boundedread, names

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
        if value < 1:
            raise ValueError("a device count must be at least 1")
        if value > MAX_DEVICE_IDS:
            raise _too_many(value)
        return list(range(value))
    if isinstance(value, (list, tuple)):
        items: list[object] = list(value)
    else:
        items = [p for p in re.split(r"[,\s]+", str(value)[:10_000].strip()) if p]
    if len(items) > MAX_DEVICE_IDS:
        raise _too_many(len(items))
    devices: list[int] = []
    for item in items:
        text = str(item).strip() if not isinstance(item, bool) else "?"
        if re.fullmatch(r"\d{1,9}-\d{1,9}", text):
            lo, hi = (int(x) for x in text.split("-"))
            if hi < lo:
                raise ValueError(f"range {text!r} runs backwards")
            if hi >= MAX_DEVICE_IDS or len(devices) + hi - lo + 1 > MAX_DEVICE_IDS:
                raise ValueError(f"range {text!r} is beyond a node's {MAX_DEVICE_IDS} devices (use ids 0-{MAX_DEVICE_IDS - 1}, e.g. 0-7)")
            devices.extend(range(lo, hi + 1))
        elif re.fullmatch(r"\d{1,9}", text):
            if int(text) >= MAX_DEVICE_IDS:
                raise ValueError(f"device id {text} is beyond a node's {MAX_DEVICE_IDS} devices (use ids 0-{MAX_DEVICE_IDS - 1})")
            devices.append(int(text))
        else:
            raise ValueError(f"{text[:40]!r} is not a device id (expected ids like 0,1,2,3 or a range 0-7)")
    if not devices:
        raise ValueError("no device ids given")
    return devices


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
    mode: Mode = "dapo"
    algorithm: Algorithm = Field("dapo", description="dapo (dynamic sampling, overlong buffer, clip-higher) or grpo "
                                 "(as verl's own GRPO example scripts: KL loss, symmetric clip, naive reward)")
    dapo_source: Optional[Literal["core", "recipe"]] = Field(
        None, description="verl >= 0.9.0: DAPO from verl's core trainer (main_ppo, V1) or the verl-recipe trainer; "
                          "default: core on 0.9.0+ (recipe below 0.9.0, where verl has only the recipe)")
    framework: Framework = "megatron"
    device: Device = "npu"
    npu_type: Literal["a2", "a3"] = Field("a2", description="Ascend A2 (910B) or A3 (two chips per NPU): picks the image")
    verl_version: str = DEFAULT_VERL_VERSION
    verl_dir: Optional[str] = Field(None, description="verl checkout on this host to read version and configs from")
    run_dir: str = Field("/verl", description="verl source root where the training runs (in the container)")

    # paths
    model_path: str = "/mnt/public/models/Qwen3-8B"
    train_file: str = "/mnt/public/data/dapo-math-17k.parquet"
    test_file: str = "/mnt/public/data/aime-2024.parquet"
    ckpts_dir: Optional[str] = None
    prompt_key: str = "prompt"

    # hardware and cluster
    devices: list[int] = Field(default_factory=lambda: list(range(8)))
    nnodes: int = Field(1, ge=1, le=1024)
    nodes: list[str] = Field(default_factory=list, description="hosts of a multi-node run, the head first (SSH names)")
    master_addr: str = "127.0.0.1"
    head_from_scheduler: bool = Field(False, description="Slurm / KubeRay / a running Ray cluster give the head: "
                                                        "its address comes at run time, not from master_addr")
    ray_port: int = Field(6379, ge=1, le=65535)
    ray_auth: Optional[Literal["token", "disabled"]] = Field(
        None, description="Ray token authentication of the Ray the scripts start and join (RAY_AUTH_MODE); default: "
                          "as Ray 2.60's `ray start --head` decides on this host (token when a Ray token is found)")
    socket_ifname: Optional[str] = None
    container: Optional[str] = None
    image: str = Field(DEFAULT_IMAGE, description="default: the official image of verl_version x device (images.py)")
    image_file: Optional[str] = Field(None, description="image tarball to `docker load` when the image is not local")
    pull_timeout: int = Field(1800, ge=1, le=86_400, description="seconds a `docker pull` may take")
    mounts: list[str] = Field(default_factory=list, description="extra HOST:CONTAINER[:ro] binds for a new container")
    http_proxy: Optional[str] = Field(None, description="proxy for a new container and pip inside it")
    https_proxy: Optional[str] = None
    device_memory_gb: Optional[float] = Field(None, gt=0, le=4096, description="memory of one device in GiB "
                                              "(detected from npu-smi/nvidia-smi, else the device name's default)")
    device_name: Optional[str] = Field(None, max_length=100, description="accelerator model, e.g. 910B3 or H100")
    host_memory_gb: Optional[float] = Field(None, gt=0, le=1_000_000, description="host RAM per node in GiB")

    # hyper-parameters
    # None: verl's own count, total_epochs x batches per epoch (trainer.total_training_steps: null)
    train_steps: Optional[int] = Field(100, ge=1, le=10_000_000)
    batch_size: int = Field(32, ge=1, le=1_000_000)
    mini_batch_size: Optional[int] = Field(None, ge=1, le=1_000_000)
    gen_batch_size: Optional[int] = Field(None, ge=1, le=10_000_000)
    lr: float = Field(1e-6, gt=0, le=1.0)
    n_resp_per_prompt: int = Field(8, ge=1, le=1024)
    max_prompt_length: int = Field(2048, ge=16, le=1_048_576)
    max_response_length: int = Field(8192, ge=16, le=1_048_576)
    temperature: float = Field(1.0, ge=0, le=10)
    clip_ratio_low: float = Field(0.2, ge=0, le=1)
    clip_ratio_high: float = Field(0.28, ge=0, le=10)
    # token-sum: verl 0.9.0+ only (rules/lengths.py loss_agg_mode_in_release)
    loss_agg_mode: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm",
                           "token-sum"] = "token-mean"
    filter_groups: bool = True
    # None (null) is refused by the rules when group filtering is on: the trainer reads the metric by name
    filter_groups_metric: Optional[str] = "acc"
    max_num_gen_batches: int = Field(10, ge=0)
    overlong_buffer: bool = True
    overlong_buffer_len: Optional[int] = Field(None, ge=1)
    overlong_penalty_factor: float = Field(1.0, ge=0)

    # parallelism
    train_tp: int = Field(4, ge=1, le=1024)
    train_pp: int = Field(2, ge=1, le=1024)
    train_cp: int = Field(1, ge=1, le=1024)
    gen_tp: Optional[int] = Field(None, ge=1, le=1024)
    allow_tp_mismatch: bool = False
    trainer_gpus: int = Field(4, ge=1, le=100_000)
    rollout_gpus: int = Field(4, ge=1, le=100_000)
    # asynchronous modes (verl >= 0.9.0 V1 trainer; fully-async: verl.experimental.fully_async_policy)
    parameter_sync_step: Optional[int] = Field(None, ge=1, le=1_000_000, description="separate-async / fully-async: "
                                               "mini-batches trained between weight syncs (default: batch / mini-batch)")
    warmup_batches: int = Field(1, ge=0, le=1024, description="colocate-/separate-async: batches queued before training")
    max_off_policy: int = Field(8, ge=1, le=1_000_000, description="V1 async: model versions a trajectory may span")
    off_policy_strategy: Literal["drop", "wait"] = "drop"
    staleness_threshold: float = Field(0.1, ge=0, le=1_000, description="fully-async: stale samples allowed per sync")
    partial_rollout: bool = True

    # rollout engine
    rollout_engine: Literal["vllm", "sglang"] = "vllm"
    gpu_memory_utilization: float = Field(0.6, gt=0, le=0.99)

    # checkpoints and validation
    save_freq: int = Field(10, ge=-1)
    test_freq: int = Field(10, ge=-1)
    val_before_train: bool = False
    # None: keep every checkpoint (verl's default, trainer.max_actor_ckpt_to_keep: null)
    max_ckpt_to_keep: Optional[int] = Field(2, ge=1)

    # features
    mask: Optional[str] = None
    # how the recompute feature recomputes (Megatron): verl's large-model scripts use uniform, 1 layer
    recompute_method: Literal["block", "uniform"] = "block"
    recompute_num_layers: int = Field(8, ge=1, le=1024)
    features: list[str] = Field(default_factory=list)
    no_default_features: bool = False
    oom_features: list[str] = Field(default_factory=list)
    estimate_features: list[str] = Field(default_factory=list, description="memory features launch added "
                                         "because the memory estimate said the plan does not fit")
    max_oom_retries: int = Field(2, ge=0, le=10)

    # logging
    swanlab: Optional[bool] = None
    swanlab_host: Optional[str] = None
    swanlab_api_key: Optional[SecretStr] = None
    swanlab_mode: Literal["cloud", "local", "offline", "disabled"] = "cloud"
    swanlab_workspace: str = "TrainingMaster"
    swanlab_log_dir: Optional[str] = Field(None, description="SwanLab log directory (default: swanlog/ under "
                                           "the run directory)")
    # verl's trainer.logger (profiles/trackers.py); empty: console, plus swanlab when SwanLab is on
    logger: list[str] = Field(default_factory=list)
    project_name: str = "verl_hlm"
    experiment_name: Optional[str] = None

    # anything else, checked against verl's config
    overrides: list[str] = Field(default_factory=list)
    strict: bool = False
    nearest_profile: bool = False  # plan a release with no profile here with the newest older one (then verify)

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
            data = {**GRPO_SPEC_DEFAULTS, **given}
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

    def with_changes(self, source: str = "derived", **changes: object) -> "RunSpec":
        """A new spec with some fields changed; the changed fields get `source` as provenance."""
        data = self.model_dump()
        data["swanlab_api_key"] = self.swanlab_api_key
        data.update(changes)
        sources = {**self.sources, **{name: source for name in changes}}
        return RunSpec(**data, sources=sources)


# modes whose trainer and rollout own separate devices (TRAINER_GPUS / ROLLOUT_GPUS)
SPLIT_MODES = ("one-step-off", "separate-async", "fully-async")

SECRET_FIELDS = frozenset({"swanlab_api_key"})


def field_names() -> list[str]:
    return [n for n in RunSpec.model_fields if n != "sources"]
