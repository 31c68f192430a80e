"""What every probe gets: the spec as given so far, where to look, and how long to wait."""

from __future__ import annotations

import os
from dataclasses import dataclass, field

from verl_deploy.preflight.commands import Runner
from verl_deploy.spec import RunSpec

# The seeds' places for shared models and data.
SEARCH_ROOTS = ("/mnt/public", "/mnt2", "/mnt/project")
# Where CANN, NNAL and the driver live; VERL_DEPLOY_ASCEND_ROOT points elsewhere for unusual installs.
ASCEND_ROOT = "/usr/local/Ascend"


@dataclass
class Context:
    spec: RunSpec
    runner: Runner  # where the training will run: this host, or its container
    host: Runner  # this host, for docker itself and the network
    search_roots: list[str] = field(default_factory=lambda: list(SEARCH_ROOTS))
    timeout: float = 10.0

    @property
    def ascend_root(self) -> str:
        return os.environ.get("VERL_DEPLOY_ASCEND_ROOT", ASCEND_ROOT)

    def given(self, name: str) -> bool:
        """The user chose this value (flag, env, file); a default may be replaced by what is detected."""
        return self.spec.sources.get(name, "default") not in ("default", "detected", "derived")
