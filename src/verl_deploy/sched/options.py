"""The scheduler's own settings (partition, time, gres name, namespace, volumes, ...), checked once.

They are not part of the RunSpec: the same training runs on any scheduler. `generate
--scheduler` and `launch --backend slurm|kuberay` build one SchedulerOptions from the flags; the
run record keeps it (backend_options) so every attempt is submitted the same way.
"""

from __future__ import annotations

import re
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from verl_deploy.findings import UserError, error

SLURM_TIME = re.compile(r"(\d+-)?\d+(:\d{1,2}){0,2}|\d+-\d+|UNLIMITED|INFINITE", re.IGNORECASE)
K8S_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
SLURM_WORD = re.compile(r"[A-Za-z0-9_.,:+@%-]+")
DEFAULT_GRES = {"gpu": "gpu", "npu": "npu"}
DEFAULT_K8S_RESOURCE = {"gpu": "nvidia.com/gpu", "npu": "huawei.com/Ascend910"}
DEFAULT_SECRET = "verl-deploy-swanlab"


class Volume(BaseModel):
    """A PersistentVolumeClaim mounted at the same path in every pod."""

    model_config = ConfigDict(frozen=True)
    claim: str
    path: str


class SchedulerOptions(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    # slurm
    partition: Optional[str] = None
    account: Optional[str] = None
    time: Optional[str] = None
    gres_name: Optional[str] = Field(None, description="the site's gres for the devices: gpu, npu, ...")
    container_mode: Literal["none", "pyxis", "docker"] = "none"
    sbatch_options: list[str] = Field(default_factory=list)
    # kuberay
    namespace: Optional[str] = None
    k8s_resource: Optional[str] = Field(None, description="nvidia.com/gpu, huawei.com/Ascend910, ...")
    volumes: list[Volume] = Field(default_factory=list)
    swanlab_secret: str = DEFAULT_SECRET

    @field_validator("partition", "account", "gres_name")
    @classmethod
    def _slurm_word(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not SLURM_WORD.fullmatch(value):
            raise ValueError(f"{value!r} has characters Slurm does not take here")
        return value

    @field_validator("time")
    @classmethod
    def _time(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not SLURM_TIME.fullmatch(value):
            raise ValueError(f"{value!r} is not a Slurm time (MINUTES, HH:MM:SS, D-HH:MM:SS)")
        return value

    @field_validator("sbatch_options")
    @classmethod
    def _sbatch(cls, value: list[str]) -> list[str]:
        for item in value:
            if not re.fullmatch(r"--[a-z][a-z-]*(=[^\s'\"\\$`]+)?", item):
                raise ValueError(f"{item!r} is not one sbatch option like --qos=high (no spaces or quotes)")
        return value

    @field_validator("namespace", "swanlab_secret")
    @classmethod
    def _k8s_name(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not K8S_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not a Kubernetes name (lower-case letters, digits, '-')")
        return value

    @field_validator("k8s_resource")
    @classmethod
    def _resource(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not re.fullmatch(r"[a-z0-9.-]+/[A-Za-z0-9._-]+", value):
            raise ValueError(f"{value!r} is not an extended resource name like nvidia.com/gpu")
        return value

    def gres(self, device: str) -> str:
        return self.gres_name or DEFAULT_GRES[device]

    def resource(self, device: str) -> str:
        return self.k8s_resource or DEFAULT_K8S_RESOURCE[device]


def parse_volume(text: str) -> Volume:
    claim, sep, path = text.partition(":")
    if not sep or not K8S_NAME.fullmatch(claim) or not path.startswith("/"):
        raise ValueError(f"{text!r} is not CLAIM:/MOUNT/PATH (a PersistentVolumeClaim and an absolute path)")
    return Volume(claim=claim, path=path.rstrip("/") or "/")


FLAG_OF = {"partition": "--partition", "account": "--account", "time": "--time", "gres_name": "--gres-name",
           "container_mode": "--slurm-container", "sbatch_options": "--sbatch-option", "namespace": "--namespace",
           "k8s_resource": "--k8s-resource", "volumes": "--k8s-volume", "swanlab_secret": "--swanlab-secret"}


def build(**values) -> SchedulerOptions:
    """SchedulerOptions from flag values (None = not given); a bad value is one finding naming the flag."""
    given = {k: v for k, v in values.items() if v is not None and v != []}
    try:
        if "volumes" in given:
            given["volumes"] = [parse_volume(v) for v in given["volumes"]]
        return SchedulerOptions(**given)
    except ValueError as exc:
        errors = exc.errors() if isinstance(exc, ValidationError) else []
        if errors:
            field = str(errors[0]["loc"][0]) if errors[0]["loc"] else "scheduler"
            message = str(errors[0]["msg"]).removeprefix("Value error, ")
        else:
            field, message = "volumes", str(exc)
        flag = FLAG_OF.get(field, field)
        raise UserError([error(flag.lstrip("-"), f"{flag}: {message}", f"fix {flag} (see --help)")]) from None
