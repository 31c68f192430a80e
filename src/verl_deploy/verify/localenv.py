"""A local environment where verl's own validation runs on a CPU box: verl's answer before booking a cluster.

`verl-deploy verify-env VERSION` installs verl==VERSION's wheel and the light packages its config code,
trainer and recipe entry modules import at module level into one directory (``pip install --no-deps
--target``), next to the torch, ray, hydra, omegaconf, numpy and pyarrow of the interpreter that runs
verl-deploy. Releases keep their own directories (verl 0.7.x wants transformers 4, 0.9.x transformers
5). A directory is published only when complete (installed under a temporary name, then renamed), so
a broken install never looks ready. `plan --verify --verify-env` then runs verify with its `python3`.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from verl_deploy.statedir import atomic_file, cache_dir

# What verl's config code, trainer and recipe entry modules import at module level beyond torch/ray/hydra
# (read from verl's imports: verl/utils/config.py -> protocol.py (tensordict), torch_functional.py
# (transformers), ray_trainer.py (codetiming, datasets via rl_dataset)); anyio (httpx, starlette) needs a
# newer typing_extensions than some environments have.
_COMMON = ["cloudpickle", "regex", "tensordict==0.10.0", "pyvers<0.2", "codetiming==1.4.0", "tqdm", "safetensors",
           "tokenizers==0.22.2", "pandas", "dill<0.4.2", "xxhash", "multiprocess<0.70.20", "pylatexenc", "math-verify",
           "latex2sympy2_extended", "antlr4-python3-runtime==4.9.3", "torchdata", "peft", "accelerate", "pillow",
           "httpx", "httpcore", "h11", "anyio", "sniffio", "cachetools", "fastapi", "starlette", "uvicorn",
           "typing_extensions>=4.16"]
# transformers builds `kernels` LayerRepository objects whenever `kernels` imports (integrations/hub_kernels.py),
# so a newer `kernels` beside the interpreter (transformers 5.25 pulls 0.19) breaks `import transformers` here
# with "Either a revision or a version must be specified": each list pins the range its transformers declares.
_TRANSFORMERS_4 = ["transformers==4.57.6", "huggingface-hub==0.36.0", "datasets==4.4.1", "hf-xet", "kernels==0.9.0"]
_TRANSFORMERS_5 = ["transformers==5.10.4", "huggingface-hub==1.33.0", "datasets==5.2.0", "hf-xet", "kernels==0.12.3"]
LIGHT_DEPS: dict[str, list[str]] = {
    "0.6.0": _COMMON + _TRANSFORMERS_4,
    "0.6.1": _COMMON + _TRANSFORMERS_4,
    "0.7.0": _COMMON + _TRANSFORMERS_4,
    "0.7.1": _COMMON + _TRANSFORMERS_4,
    "0.8.0": _COMMON + _TRANSFORMERS_4,
    "0.9.0": _COMMON + _TRANSFORMERS_5,
    "0.9.1": _COMMON + _TRANSFORMERS_5,
}
# the interpreter must bring these (too large, or platform builds, to install per release)
BASE_MODULES = ("torch", "ray", "hydra", "omegaconf", "numpy", "pyarrow")


class EnvProblem(Exception):
    """The environment cannot be built or used; the message says why, `fix` what to do."""

    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.fix = fix


@dataclass(frozen=True)
class VerifyEnv:
    version: str
    site: Path  # the --target directory holding verl and its light imports

    @property
    def run_tree(self) -> Path:
        """A verl source root for verify: verl/ from this environment, recipe/ where `--recipe` linked one."""
        return self.site.parent / f"run-{self.version}"

    @property
    def python(self) -> Path:
        """A `python3` that imports this verl: a script that execs the interpreter (a symlink would lose a venv)."""
        return self.site / "bin" / "python3"


def root() -> Path:
    """Where the environments live ($VERL_DEPLOY_VERIFY_ENV_DIR, else the cache's verify-env/)."""
    return Path(os.environ.get("VERL_DEPLOY_VERIFY_ENV_DIR") or cache_dir() / "verify-env")


def _marker(version: str) -> str:
    return version + "\n" + " ".join(LIGHT_DEPS.get(version, [])) + "\n"  # a changed list reinstalls


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


def find(version: str, where: Path | None = None) -> VerifyEnv | None:
    """The complete environment of VERSION, or None."""
    site = (where or root()) / f"verl-{version}"
    if (site / "verl" / "__init__.py").is_file() and _read(site / ".complete") == _marker(version):
        _write_python(site)
        return VerifyEnv(version, site)
    return None


def missing_base_modules() -> list[str]:
    return [name for name in BASE_MODULES if importlib.util.find_spec(name) is None]


def build(version: str, where: Path | None = None, announce: Callable[[str], None] | None = None,
          timeout: float = 900) -> VerifyEnv:
    """Install verl==VERSION and its light imports once; raise EnvProblem when that cannot be done."""
    if version not in LIGHT_DEPS:
        raise EnvProblem(f"no verify environment is known for verl {version} (known: {', '.join(LIGHT_DEPS)})",
                         "give one of those versions, or verify inside the training's container (--container)")
    found = find(version, where)
    if found:
        return found
    lacking = missing_base_modules()
    if lacking:
        raise EnvProblem(f"{sys.executable} cannot import {', '.join(lacking)}, which verl's code needs",
                         "install them in this environment first: pip install 'verl-deploy[ray]' hydra-core pyarrow "
                         "and a CPU torch (pip install torch --index-url https://download.pytorch.org/whl/cpu)")
    target = (where or root()) / f"verl-{version}"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        staging = Path(tempfile.mkdtemp(prefix=f".verl-{version}-", dir=target.parent))
    except OSError as exc:
        raise EnvProblem(f"cannot create {target.parent}: {exc}",
                         "set VERL_DEPLOY_VERIFY_ENV_DIR (or VERL_DEPLOY_CACHE_DIR) to a writable directory") from None
    if announce:
        announce(f"installing verl {version} and {len(LIGHT_DEPS[version])} light packages into {target} "
                 "(pip, once; a few hundred MB)")
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check",
           "--no-compile", "--target", str(staging), f"verl=={version}", *LIGHT_DEPS[version]]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise EnvProblem(f"pip install verl=={version} failed: {exc}", "check the package index is reachable") from None
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        raise EnvProblem(f"pip install verl=={version} --no-deps --target failed: {last[:300]}",
                         "check the package index is reachable (pip config list), then run verify-env again")
    (staging / ".complete").write_text(_marker(version), encoding="utf-8")
    if target.exists() and _read(target / ".complete") != _marker(version):
        shutil.rmtree(target, ignore_errors=True)  # an older, unmarked install: replaced by this complete one
    try:
        os.replace(staging, target)
    except OSError:  # another process published it first
        shutil.rmtree(staging, ignore_errors=True)
    done = find(version, where)
    if done is None:
        raise EnvProblem(f"the verl {version} environment in {target} is not complete after installing",
                         "remove that directory and run verify-env again")
    return done


def _write_python(site: Path) -> None:
    """SITE/bin/python3: this interpreter with SITE first on PYTHONPATH (rewritten when the interpreter moved).

    Written whole (temp file, rename) and naming the real SITE: two commands that find the same environment, one
    through a symlink, once rewrote it while the other ran it, and `sh` ran half a file (an empty verify)."""
    real = site.resolve()
    shim = real / "bin" / "python3"
    text = (f'#!/bin/sh\nPYTHONPATH="{real}${{PYTHONPATH:+:$PYTHONPATH}}" RAY_USAGE_STATS_ENABLED=0 '
            f'TOKENIZERS_PARALLELISM=false exec "{sys.executable}" "$@"\n')
    if _read(shim) == text:
        return
    try:
        with atomic_file(shim) as handle:
            handle.write(text.encode("utf-8"))
            os.fchmod(handle.fileno(), 0o755)
    except OSError:
        pass  # a read-only cache still serves through PYTHONPATH; verify reports a missing python3 if it must


def link_run_tree(env: VerifyEnv, recipe: Path | None = None) -> Path:
    """The env's run tree: verl/ -> the installed verl, recipe/ -> RECIPE (a verl-recipe checkout, or a tree
    holding recipe/). DAPO before verl's core DAPO imports recipe.dapo.main_dapo from the run directory."""
    tree = env.run_tree
    tree.mkdir(parents=True, exist_ok=True)
    _relink(tree / "verl", env.site / "verl")
    if recipe is not None:
        recipe = recipe.expanduser().resolve()
        package = recipe / "recipe" if (recipe / "recipe" / "dapo").is_dir() else recipe
        if not (package / "dapo").is_dir():
            raise EnvProblem(f"{recipe} holds no dapo/ recipe (neither {recipe}/dapo nor {recipe}/recipe/dapo)",
                             "give a verl-recipe checkout (git clone https://github.com/verl-project/verl-recipe) "
                             "or a verl checkout that has recipe/")
        _relink(tree / "recipe", package)
    return tree


def _relink(link: Path, target: Path) -> None:
    if link.is_symlink() or link.exists():
        if link.is_symlink() and Path(os.readlink(link)) == target:
            return
        if link.is_dir() and not link.is_symlink():
            shutil.rmtree(link)
        else:
            link.unlink()
    link.symlink_to(target)
