"""The scheduler's own settings (partition, time, gres name, namespace, volumes, ...), checked once, and the
backends built from them.

They are not part of the RunSpec: the same training runs on any scheduler. `generate
--scheduler` and `launch --backend slurm|kuberay` build one SchedulerOptions from the flags; the
run record keeps it (backend_options) so every attempt is submitted the same way.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from verl_deploy.backends.protocol import ScheduledBackend, Target
from verl_deploy.findings import Finding, UserError, error

if TYPE_CHECKING:
    from verl_deploy.spec import RunSpec

SLURM_TIME = re.compile(r"(\d+-)?\d+(:\d{1,2}){0,2}|\d+-\d+|UNLIMITED|INFINITE", re.IGNORECASE)
K8S_NAME = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
SLURM_WORD = re.compile(r"[A-Za-z0-9_.,:+@%-]+")
DEFAULT_GRES = {"gpu": "gpu", "npu": "npu"}
DEFAULT_K8S_RESOURCE = {"gpu": "nvidia.com/gpu", "npu": "huawei.com/Ascend910"}
DEFAULT_SECRET = "verl-deploy-swanlab"
RAY_TOKEN_KEY = "auth_token"  # the key of the Ray token in a --k8s-ray-auth secret:NAME Secret


class OptionProblem(ValueError):
    """What is wrong with a scheduler flag, and `fix`: what to write instead."""

    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.fix = fix


# what submit.sbatch (and launch's sbatch command line) set themselves: sbatch long option -> the fix.
# sbatch reads an unambiguous prefix of a long option as the option (getopt_long), so prefixes count too.
SBATCH_OWN = {
    "--job-name": "remove it: verl-deploy names the job (launch names it after the run)",
    "--nodes": "remove it: the node count comes from the plan (--nnodes)",
    "--ntasks-per-node": "remove it: submit.sbatch runs one task per node",
    "--ntasks": "remove it: submit.sbatch runs one task per node (--nnodes tasks)",
    "--gres": "remove it: use --gres-name NAME (the count is the plan's devices per node)",
    "--partition": "use --partition instead",
    "--account": "use --account instead",
    "--time": "use --time instead",
    "--output": "remove it: the job's output is the run's log (verl-deploy-%j.out; launch sets its own)",
    "--error": "remove it: the job's errors must reach the run's log, where diagnose reads them",
    "--requeue": "remove it: submit.sbatch sets --no-requeue; launch resubmits a failed attempt itself",
    "--no-requeue": "remove it: submit.sbatch sets it already",
}
RESERVED_VOLUME_PATHS = {"/verl-deploy": "the generated scripts", "/dev/shm": "shared memory"}


def sbatch_conflict(option: str) -> tuple[str, str] | None:
    """(the option submit.sbatch sets, the fix) when `option` (--NAME[=VALUE]) would set it again."""
    name = option.split("=", 1)[0]
    if name in SBATCH_OWN:
        return name, SBATCH_OWN[name]
    for own, fix in SBATCH_OWN.items():
        if own.startswith(name):
            return own, fix
    return None


class Volume(BaseModel):
    """A PersistentVolumeClaim mounted at the same path in every pod (read-only with `:ro`)."""

    model_config = ConfigDict(frozen=True)
    claim: str
    path: str
    read_only: bool = False


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
    # Ray token auth of the RayJob's cluster: "token" (authOptions, KubeRay >= 1.5.1 makes the token) or
    # "secret:NAME" (older operators: RAY_AUTH_MODE=token and the token from Secret NAME, key auth_token)
    k8s_ray_auth: Optional[str] = None

    @field_validator("partition", "account", "gres_name")
    @classmethod
    def _slurm_word(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not SLURM_WORD.fullmatch(value):
            raise ValueError(f"{value!r} has characters Slurm does not take here")
        return value

    @field_validator("gres_name")
    @classmethod
    def _gres_name(cls, value: Optional[str]) -> Optional[str]:
        """NAME or NAME:TYPE: submit.sbatch appends the count (--gres=NAME[:TYPE]:COUNT)."""
        if value is None:
            return value
        parts = value.split(":")
        if "," in value or len(parts) > 2 or not all(parts):
            raise OptionProblem(f"{value!r} is not one gres NAME or NAME:TYPE",
                                "give one gres, e.g. --gres-name gpu or --gres-name gpu:a100")
        if len(parts) == 2 and parts[1].isdigit():
            raise OptionProblem(f"{value!r} holds a count ({parts[1]}); Slurm would read it as a type "
                                f"(--gres={value}:N)",
                                f"give the name only, --gres-name {parts[0]} (the count is the plan's devices "
                                "per node: set it with --devices)")
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
                raise OptionProblem(f"{item!r} is not one sbatch option like --qos=high (no spaces or quotes)",
                                    "write the long form --NAME=VALUE (short options like -N are not taken)")
            conflict = sbatch_conflict(item)
            if conflict:
                raise OptionProblem(f"{item!r} sets {conflict[0]}, which submit.sbatch sets itself", conflict[1])
        return value

    @field_validator("volumes")
    @classmethod
    def _unique_mounts(cls, value: list[Volume]) -> list[Volume]:
        seen: set[str] = set()
        for volume in value:
            if volume.path in RESERVED_VOLUME_PATHS:
                raise OptionProblem(f"{volume.claim}:{volume.path}: every pod mounts "
                                    f"{RESERVED_VOLUME_PATHS[volume.path]} at {volume.path}",
                                    "mount the claim at another path")
            if volume.path in seen:
                raise OptionProblem(f"two volumes at {volume.path} (Kubernetes refuses a pod whose mount paths repeat)",
                                    "give each --k8s-volume its own mount path")
            seen.add(volume.path)
        return value

    @field_validator("namespace", "swanlab_secret")
    @classmethod
    def _k8s_name(cls, value: Optional[str]) -> Optional[str]:
        if value is not None and not K8S_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not a Kubernetes name (lower-case letters, digits, '-')")
        return value

    @field_validator("k8s_ray_auth")
    @classmethod
    def _ray_auth(cls, value: Optional[str]) -> Optional[str]:
        if value is None or value in ("token", "disabled"):
            return value
        name = value.removeprefix("secret:")
        if value.startswith("secret:") and K8S_NAME.fullmatch(name):
            return value
        raise OptionProblem(f"{value!r} is not token, disabled or secret:NAME",
                            "--k8s-ray-auth token (KubeRay >= 1.5.1 makes the token), or secret:NAME for a Secret "
                            f"holding it under `{RAY_TOKEN_KEY}` (older operators)")

    @property
    def ray_token_secret(self) -> Optional[str]:
        auth = self.k8s_ray_auth or ""
        return auth.removeprefix("secret:") if auth.startswith("secret:") else None

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
    """CLAIM:/PATH or CLAIM:/PATH:ro (read-only)."""
    claim, sep, path = text.partition(":")
    read_only = path.endswith((":ro", ":rw"))
    if read_only:
        path, mode = path[:-3], path[-2:]
        read_only = mode == "ro"
    fix = "write CLAIM:/PATH or CLAIM:/PATH:ro, e.g. --k8s-volume models:/mnt/models:ro"
    if not sep or not K8S_NAME.fullmatch(claim) or not path.startswith("/"):
        raise OptionProblem(f"{text!r} is not CLAIM:/MOUNT/PATH (a PersistentVolumeClaim and an absolute path)", fix)
    if ":" in path or re.search(r"[\x00-\x20\x7f]", path) or len(path) > 4096:
        raise OptionProblem(f"{text!r}: the mount path {path!r} has a ':' or a space or control character", fix)
    parts = path.strip("/").split("/")
    if any(part in (".", "..") for part in parts):
        raise OptionProblem(f"{text!r}: the mount path has a '.' or '..' part", fix)
    return Volume(claim=claim, path=path.rstrip("/") or "/", read_only=read_only)


FLAG_OF = {"partition": "--partition", "account": "--account", "time": "--time", "gres_name": "--gres-name",
           "container_mode": "--slurm-container", "sbatch_options": "--sbatch-option", "namespace": "--namespace",
           "k8s_resource": "--k8s-resource", "volumes": "--k8s-volume", "swanlab_secret": "--swanlab-secret",
           "k8s_ray_auth": "--k8s-ray-auth"}


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
            cause = (errors[0].get("ctx") or {}).get("error")
        else:
            field, message, cause = "volumes", str(exc), exc
        flag = FLAG_OF.get(field, field)
        fix = getattr(cause, "fix", None) or f"fix {flag} (see --help)"
        raise UserError([error(flag.lstrip("-"), f"{flag}: {message}", fix)]) from None


class OptionsBackend(ScheduledBackend):
    """A scheduler backend built from the spec and its SchedulerOptions (Slurm, KubeRay)."""

    def __init__(self, spec: RunSpec | None, options: SchedulerOptions):
        self.spec = spec  # None when rebuilt from a damaged record: stop still works, it reads the handle
        self.options = options

    @classmethod
    def configure(cls, spec: RunSpec, target: Target) -> tuple[dict, list[Finding]]:
        try:
            options = build(**target.scheduler)
        except UserError as exc:
            return {}, list(exc.findings)
        return {"scheduler": options.model_dump(mode="json")}, cls.check_cluster(spec, options)

    @classmethod
    def check_cluster(cls, spec: RunSpec, options: SchedulerOptions) -> list[Finding]:
        """What the scheduler says before anything is submitted: could it ever run this job?"""
        return []

    @classmethod
    def from_options(cls, options: dict, spec: RunSpec | None, container: str | None, run_dir: str) -> "OptionsBackend":
        return cls(spec, SchedulerOptions(**options.get("scheduler", {})))
