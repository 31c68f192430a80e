"""Real verl in tests: a release installed with `pip install --no-deps --target` plus the few light
imports its config and data code needs (CPU torch comes from the test environment), cached per version.

    site = verl_site("0.9.1")                 # None when it cannot be installed here (no index, no pip)
    result = run_with_verl("0.9.1", code)     # python -c code with that verl importable
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# Enough of verl's dependencies to import verl.protocol, verl.utils.* and the config dataclasses on CPU.
_LIGHT = ["tensordict==0.10.0", "pyvers", "codetiming", "regex", "tqdm", "safetensors", "tokenizers==0.22.1"]
_HF = {
    "old": ["transformers==4.57.1", "huggingface_hub==0.36.0"],  # verl < 0.9
    "new": ["transformers==5.9.0", "huggingface_hub==1.5.0", "httpx", "httpcore", "h11", "anyio", "sniffio"],
}


def _cache_root() -> Path:
    root = os.environ.get("VERL_DEPLOY_TEST_CACHE")
    return Path(root) if root else Path.home() / ".cache" / "verl-deploy-tests"


def _requirements(version: str) -> list[str]:
    major_minor = tuple(int(p) for p in version.split(".")[:2])
    return [f"verl=={version}", *_LIGHT, *_HF["new" if major_minor >= (0, 9) else "old"]]


def verl_site(version: str) -> Path | None:
    """The directory holding verl==version (+ light imports); installed once, atomically, under a lock."""
    site = _cache_root() / f"verl-{version}"
    if (site / "verl" / "version" / "version").is_file():
        return site
    site.parent.mkdir(parents=True, exist_ok=True)
    with open(site.parent / f".verl-{version}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if (site / "verl" / "version" / "version").is_file():
            return site
        staging = Path(tempfile.mkdtemp(prefix=f".verl-{version}-", dir=site.parent))
        cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check",
               "--target", str(staging), *_requirements(version)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
        except (OSError, subprocess.TimeoutExpired):
            done = None
        if done is None or done.returncode != 0 or not (staging / "verl").is_dir():
            shutil.rmtree(staging, ignore_errors=True)
            return None
        shutil.rmtree(site, ignore_errors=True)
        os.replace(staging, site)
    return site


def run_with_verl(version: str, code: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """Run `python -c code` with verl==version importable (no devices: CPU torch, no Ray cluster)."""
    site = verl_site(version)
    if site is None:
        raise RuntimeError(f"verl {version} cannot be installed here")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), *filter(None, [env.get("PYTHONPATH")])])
    env.setdefault("VERL_USE_EXTERNAL_PLUGINS", "none")
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          cwd=str(cwd or tempfile.gettempdir()), timeout=600)
