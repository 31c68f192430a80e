"""Which backend a kind names, and which kind `--backend auto` means; the only place that lists the kinds.

The run record keeps a backend by its kind and options; `make_backend` builds it again from them (also
from an attempt's handle.json when run.json is damaged). Each module is imported only when its kind is
used (Ray's client, kubectl's and Slurm's helpers are not everyone's).
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, cast

from verl_deploy.backends.protocol import Backend

if TYPE_CHECKING:
    from verl_deploy.spec import RunSpec

KINDS: dict[str, str] = {  # kind -> module:class
    "local": "verl_deploy.backends.local:LocalBackend",
    "docker": "verl_deploy.backends.docker:DockerBackend",
    "ray": "verl_deploy.backends.rayjobs:RayJobsBackend",
    "slurm": "verl_deploy.backends.slurm:SlurmBackend",
    "kuberay": "verl_deploy.backends.kuberay:KubeRayBackend",
}
AUTO = "auto"


class UnknownBackend(KeyError):
    """A kind no backend has (a mistyped --backend, a damaged record)."""


def choose(requested: str, *, ray_address: str | None, container: str | None) -> str:
    """`auto`: ray with a Ray job server, docker with a container, else local; any other name as given."""
    if requested != AUTO:
        return requested
    return "ray" if ray_address else "docker" if container else "local"


def backend_class(kind: str) -> type[Backend]:
    """The class of a kind's backend; UnknownBackend when there is none."""
    if kind not in KINDS:
        raise UnknownBackend(kind)
    module, _, name = KINDS[kind].partition(":")
    return cast("type[Backend]", getattr(importlib.import_module(module), name))


def runs_here(kind: str) -> bool:
    """The kind's training runs on this host (or a container on it); an unknown kind is refused later, as here."""
    try:
        return backend_class(kind).runs_here
    except UnknownBackend:
        return True


def make_backend(kind: str, options: dict, spec: RunSpec | None = None, container: str | None = None,
                 run_dir: str = "/verl") -> Backend:
    """A backend from what the record (or, when it is damaged, the attempt's handle.json) keeps."""
    return backend_class(kind).from_options(options, spec, container, run_dir)


def listed() -> str:
    """The kinds as a fix names them: `local, docker, ray, slurm or kuberay`."""
    names = list(KINDS)
    return ", ".join(names[:-1]) + " or " + names[-1]
