"""The scheduler flags `generate --scheduler` and `launch --backend slurm|kuberay` share, declared once."""

from __future__ import annotations

import functools
import inspect
import typing
from typing import Any, Callable, List, Optional

import typer

P = inspect.Parameter
SLURM, K8S = "Slurm (--scheduler/--backend slurm)", "KubeRay (--scheduler/--backend kuberay)"


def _opt(*names: str, help: str, panel: str, **kw: Any) -> Any:
    return typer.Option(None, *names, help=help, show_default=False, rich_help_panel=panel, **kw)


SCHED_OPTIONS: list[tuple[str, Any, Any]] = [
    ("partition", Optional[str], _opt("--partition", help="Slurm partition.", panel=SLURM)),
    ("account", Optional[str], _opt("--account", help="Slurm account to charge.", panel=SLURM)),
    ("time", Optional[str], _opt("--time", help="Slurm time limit: MINUTES, HH:MM:SS or D-HH:MM:SS.", panel=SLURM)),
    ("gres_name", Optional[str], _opt("--gres-name", help="The site's gres for the devices (default gpu on GPU, npu "
                                                          "on NPU): --gres=NAME:DEVICES_PER_NODE.", panel=SLURM)),
    ("container_mode", Optional[str], _opt("--slurm-container", help="none (default) | pyxis (srun --container-image="
                                                                     "--image) | docker (srun docker exec --container).",
                                           panel=SLURM)),
    ("sbatch_options", Optional[List[str]], _opt("--sbatch-option", metavar="--NAME=VALUE",
                                                 help="Another #SBATCH line, e.g. --qos=high (repeatable).", panel=SLURM)),
    ("namespace", Optional[str], _opt("--namespace", help="Kubernetes namespace (default: your context's).", panel=K8S)),
    ("k8s_resource", Optional[str], _opt("--k8s-resource", help="Device resource per pod (default nvidia.com/gpu on GPU, "
                                                                "huawei.com/Ascend910 on NPU).", panel=K8S)),
    ("volumes", Optional[List[str]], _opt("--k8s-volume", metavar="CLAIM:/PATH",
                                          help="Mount a PersistentVolumeClaim at PATH in every pod (repeatable; default: "
                                               "the model, data and checkpoint directories as hostPath).", panel=K8S)),
    ("swanlab_secret", Optional[str], _opt("--swanlab-secret", help="Secret holding the SwanLab key under `api-key` "
                                                                   "(default verl-deploy-swanlab).", panel=K8S)),
    ("k8s_ray_auth", Optional[str], _opt("--k8s-ray-auth", metavar="token|secret:NAME",
                                         help="Ray token authentication for the RayJob's cluster: token (authOptions; "
                                              "KubeRay >= 1.5.1 makes the token) or secret:NAME (older operators: the "
                                              "token from Secret NAME, key auth_token, in every pod).", panel=K8S)),
]
SCHED_OPTION_NAMES = {name for name, _, _ in SCHED_OPTIONS}


def scheduler_options(func: Callable) -> Callable:
    """Add the scheduler flags to a command (apply below @spec_options); they arrive in **kwargs."""
    hints = typing.get_type_hints(func)
    own = [p.replace(annotation=hints.get(p.name, p.annotation), kind=P.KEYWORD_ONLY)
           for p in inspect.signature(func).parameters.values() if p.kind is not P.VAR_KEYWORD]
    added = [P(name, P.KEYWORD_ONLY, default=option, annotation=annotation) for name, annotation, option in SCHED_OPTIONS]

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        return func(**kwargs)

    params = own + added + [P("options", P.VAR_KEYWORD)]
    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params if p.kind is not P.VAR_KEYWORD}
    del wrapper.__wrapped__
    return wrapper


def scheduler_from(options: dict[str, Any]):
    """SchedulerOptions from the parsed flags (raises UserError naming the flag)."""
    from verl_deploy.backends.scheduler_options import build

    return build(**{name: options.get(name) for name in SCHED_OPTION_NAMES})
