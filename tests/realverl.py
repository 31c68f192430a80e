"""Real verl in the tests: a release installed once per machine, next to the light packages its
config code and trainer modules import, and a way to run code against it.

`pip install --no-deps --target` keeps each release in its own directory (verl 0.7.x wants
transformers 4, 0.9.x transformers 5, so they cannot share the global site-packages). torch,
ray, hydra, omegaconf, numpy and pyarrow come from the test environment itself. The cache is
$VERL_DEPLOY_TEST_CACHE, else ~/.cache/verl-deploy-tests; a directory is published only when
complete (installed under a temporary name, then renamed), so a broken install never looks ready.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import verlzygote
from verl_deploy.statedir import atomic_file
from verl_deploy.verify import localenv
from verl_deploy.verify.localenv import LIGHT_DEPS  # noqa: F401  (the tests' list is the product's list)

_why_not: dict[str, str] = {}


def cache_root() -> Path:
    """Where the releases are installed (shared by every test that runs real verl code)."""
    return Path(os.environ.get("VERL_DEPLOY_TEST_CACHE") or Path.home() / ".cache" / "verl-deploy-tests")


def why_not(version: str) -> str:
    """Why verl_site(version) returned None (for the skip message)."""
    return _why_not.get(version, f"verl {version} is not installable here")


def verl_site(version: str) -> Path | None:
    """The directory holding verl==version and its light imports, installed once (by the product's own
    `verify-env` builder); None if it cannot be."""
    from filelock import FileLock

    cache_root().mkdir(parents=True, exist_ok=True)
    try:
        with FileLock(str(cache_root() / f".verl-{version}.lock")):  # parallel workers: one installs, the rest wait
            site = localenv.build(version, where=cache_root()).site
            _warm_start_hook(site)
            return site
    except localenv.EnvProblem as exc:
        _why_not[version] = f"{exc} ({exc.fix})"
        return None


def _warm_start_hook(site: Path) -> None:
    """SITE/sitecustomize.py: `python -c`/`python -` with this release hand over to a warm interpreter while the
    suite runs (tests/verlzygote.py); outside the suite it does nothing."""
    hook = site / "sitecustomize.py"
    try:
        if not hook.is_file() or hook.read_text(encoding="utf-8") != verlzygote.SITECUSTOMIZE:
            with atomic_file(hook) as handle:  # whole: a Python starting meanwhile reads the old or the new file
                handle.write(verlzygote.SITECUSTOMIZE.encode("utf-8"))
                os.fchmod(handle.fileno(), 0o644)
    except OSError:
        pass  # a read-only cache: its runs stay cold


def env_with_verl(version: str, base: dict | None = None) -> dict[str, str]:
    """An environment whose `python3` imports verl==version (PYTHONPATH first), or raises LookupError."""
    site = verl_site(version)
    if site is None:
        raise LookupError(why_not(version))
    env = dict(os.environ if base is None else base)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), env.get("PYTHONPATH", "")) if p)
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return env


def run_with_verl(version: str, code: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run `code` in a fresh Python that imports verl==version; raises LookupError if not installable."""
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd,
                          env=env_with_verl(version), timeout=300)
