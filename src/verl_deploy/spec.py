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

Mode = Literal["dapo", "one-step-off"]
Framework = Literal["megatron", "fsdp"]
Device = Literal["npu", "gpu"]

DEFAULT_VERL_VERSION = "0.7.0"
DEFAULT_IMAGE = "quay.io/ascend/verl:verl-8.3.rc1-910b-ubuntu22.04-py3.11-v0.7.0"  # images.py's 0.7.0 A2 row


def parse_devices(value: object) -> list[int]:
    """Accept "0,1,2", "0-3", [0, 1] or 8 (meaning 0..7)."""
    if isinstance(value, int) and not isinstance(value, bool):
        if value < 1:
            raise ValueError("a device count must be at least 1")
        return list(range(value))
    if isinstance(value, (list, tuple)):
        items: list[object] = list(value)
    else:
        items = [p for p in re.split(r"[,\s]+", str(value).strip()) if p]
    devices: list[int] = []
    for item in items:
        text = str(item).strip()
        if re.fullmatch(r"\d+-\d+", text):
            lo, hi = (int(x) for x in text.split("-"))
            if hi < lo:
                raise ValueError(f"range {text!r} runs backwards")
            devices.extend(range(lo, hi + 1))
        elif re.fullmatch(r"\d+", text):
            devices.append(int(text))
        else:
            raise ValueError(f"{text!r} is not a device id (expected ids like 0,1,2,3 or a range 0-7)")
    if not devices:
        raise ValueError("no device ids given")
    return devices


def parse_hosts(value: object) -> list[str]:
    """"h1,h2", a list, or "@hostfile" (one host per line, # comments): the head first."""
    if value is None:
        return []
    if isinstance(value, str) and value.startswith("@"):
        try:
            lines = open(value[1:], encoding="utf-8").read().splitlines()
        except OSError as exc:
            raise ValueError(f"cannot read the host file {value[1:]!r}: {exc.strerror}") from None
        items: list = [line.split("#", 1)[0] for line in lines]
    else:
        items = value.split(",") if isinstance(value, str) else list(value)
    hosts = [str(v).strip() for v in items if str(v).strip()]
    for host in hosts:
        if not re.fullmatch(r"[A-Za-z0-9._:@\[\]-]+", host):
            raise ValueError(f"{host!r} is not a host name or address")
    return hosts


class RunSpec(BaseModel):
    """The resolved run. Frozen: a change (e.g. a feature added on OOM) makes a new spec."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    # what and how
    mode: Mode = "dapo"
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
    ray_port: int = Field(6379, ge=1, le=65535)
    socket_ifname: Optional[str] = None
    container: Optional[str] = None
    image: str = Field(DEFAULT_IMAGE, description="default: the official image of verl_version x device (images.py)")
    http_proxy: Optional[str] = Field(None, description="proxy for a new container and pip inside it")
    https_proxy: Optional[str] = None

    # hyper-parameters
    train_steps: int = Field(100, ge=1, le=10_000_000)
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
    loss_agg_mode: Literal["token-mean", "seq-mean-token-sum", "seq-mean-token-mean", "seq-mean-token-sum-norm"] = "token-mean"
    filter_groups: bool = True
    filter_groups_metric: str = "acc"
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

    # rollout engine
    rollout_engine: Literal["vllm", "sglang"] = "vllm"
    gpu_memory_utilization: float = Field(0.6, gt=0, le=0.99)

    # checkpoints and validation
    save_freq: int = Field(10, ge=-1)
    test_freq: int = Field(10, ge=-1)
    val_before_train: bool = False
    max_ckpt_to_keep: int = Field(2, ge=1)

    # features
    mask: Optional[str] = None
    features: list[str] = Field(default_factory=list)
    no_default_features: bool = False
    oom_features: list[str] = Field(default_factory=list)
    max_oom_retries: int = Field(2, ge=0, le=10)

    # logging
    swanlab: Optional[bool] = None
    swanlab_host: Optional[str] = None
    swanlab_api_key: Optional[SecretStr] = None
    swanlab_mode: Literal["cloud", "local", "offline", "disabled"] = "cloud"
    swanlab_workspace: str = "TrainingMaster"
    swanlab_log_dir: str = "/verl/swanlog"
    project_name: str = "verl_hlm"
    experiment_name: Optional[str] = None

    # anything else, checked against verl's config
    overrides: list[str] = Field(default_factory=list)
    strict: bool = False

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

    @field_validator("devices", mode="before")
    @classmethod
    def _devices(cls, value: object) -> list[int]:
        return parse_devices(value)

    @field_validator("nodes", mode="before")
    @classmethod
    def _hosts(cls, value: object) -> list[str]:
        return parse_hosts(value)

    @field_validator("features", "overrides", "oom_features", mode="before")
    @classmethod
    def _string_list(cls, value: object) -> list[str]:
        if value is None:
            return []
        if isinstance(value, str):
            return [value]
        return [str(v) for v in value]

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

    @field_validator("model_path", "train_file", "test_file", "ckpts_dir", "run_dir", "swanlab_log_dir",
                     "project_name", "experiment_name", "prompt_key")
    @classmethod
    def _no_control_chars(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and re.search(r"[\x00-\x1f\x7f]", value):
            raise ValueError("contains a control character (newline, tab, ...)")
        if value is not None and not value.strip():
            raise ValueError("is empty")
        return value

    # derived values: computed, never stored twice
    @property
    def swanlab_on(self) -> bool:
        """On when the user says so, or gives a host. A key alone (saved by init or `swanlab login`, or an
        SWANLAB_API_KEY kept in the shell for other work) never turns it on."""
        if self.swanlab is not None:
            return self.swanlab
        return bool(self.swanlab_host)

    @property
    def rollout_tp(self) -> int:
        return self.gen_tp if self.gen_tp is not None else self.train_tp

    @property
    def effective_experiment_name(self) -> str:
        if self.experiment_name:
            return self.experiment_name
        model = re.sub(r"[^A-Za-z0-9._-]+", "_", self.model_path.rstrip("/").rsplit("/", 1)[-1]).strip("_") or "model"
        return f"{self.mode}-{model}-{self.framework}-{self.device}"

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
        return self.trainer_gpus if self.mode == "one-step-off" else len(self.devices)

    def with_changes(self, source: str = "derived", **changes: object) -> "RunSpec":
        """A new spec with some fields changed; the changed fields get `source` as provenance."""
        data = self.model_dump()
        data["swanlab_api_key"] = self.swanlab_api_key
        data.update(changes)
        sources = {**self.sources, **{name: source for name in changes}}
        return RunSpec(**data, sources=sources)


SECRET_FIELDS = frozenset({"swanlab_api_key"})


def field_names() -> list[str]:
    return [n for n in RunSpec.model_fields if n != "sources"]
