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

# What verl's config code, trainer and recipe entry modules import at module level beyond the
# test environment (read from verl's imports: verl/utils/config.py -> protocol.py (tensordict),
# torch_functional.py (transformers), ray_trainer.py (codetiming, datasets via rl_dataset)); anyio (httpx,
# starlette) needs a newer typing_extensions than the test environment's.
_COMMON = ["cloudpickle", "regex", "tensordict==0.10.0", "pyvers<0.2", "codetiming==1.4.0", "tqdm", "safetensors", "tokenizers==0.22.2",
           "pandas", "dill<0.4.2", "xxhash", "multiprocess<0.70.20", "pylatexenc", "math-verify", "latex2sympy2_extended",
           "antlr4-python3-runtime==4.9.3", "torchdata", "peft", "accelerate", "pillow", "httpx", "httpcore", "h11",
           "anyio", "sniffio", "cachetools", "fastapi", "starlette", "uvicorn", "typing_extensions>=4.16"]
_TRANSFORMERS_4 = ["transformers==4.57.6", "huggingface-hub==0.36.0", "datasets==4.4.1", "hf-xet"]
_TRANSFORMERS_5 = ["transformers==5.10.4", "huggingface-hub==1.33.0", "datasets==5.2.0", "hf-xet"]
LIGHT_DEPS: dict[str, list[str]] = {
    "0.6.0": _COMMON + _TRANSFORMERS_4,
    "0.6.1": _COMMON + _TRANSFORMERS_4,
    "0.7.0": _COMMON + _TRANSFORMERS_4,
    "0.7.1": _COMMON + _TRANSFORMERS_4,
    "0.8.0": _COMMON + _TRANSFORMERS_4,
    "0.9.0": _COMMON + _TRANSFORMERS_5,
    "0.9.1": _COMMON + _TRANSFORMERS_5,
}
_why_not: dict[str, str] = {}


def cache_root() -> Path:
    """Where the releases are installed (shared by every test that runs real verl code)."""
    return Path(os.environ.get("VERL_DEPLOY_TEST_CACHE") or Path.home() / ".cache" / "verl-deploy-tests")


def why_not(version: str) -> str:
    """Why verl_site(version) returned None (for the skip message)."""
    return _why_not.get(version, f"verl {version} is not installable here")


def verl_site(version: str) -> Path | None:
    """The directory holding verl==version and its light imports, installed once; None if it cannot be."""
    target = cache_root() / f"verl-{version}"
    marker = version + "\n" + " ".join(LIGHT_DEPS.get(version, [])) + "\n"  # a changed list reinstalls
    if (target / "verl" / "__init__.py").is_file() and _read(target / ".complete") == marker:
        return target
    if version not in LIGHT_DEPS:
        _why_not[version] = f"no list of light dependencies for verl {version} in tests/realverl.py"
        return None
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".verl-{version}-", dir=target.parent))
    cmd = [sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check",
           "--no-compile", "--target", str(staging), f"verl=={version}", *LIGHT_DEPS[version]]
    try:
        result = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    except (OSError, subprocess.TimeoutExpired) as exc:
        shutil.rmtree(staging, ignore_errors=True)
        _why_not[version] = f"pip install verl=={version} failed: {exc}"
        return None
    if result.returncode != 0:
        shutil.rmtree(staging, ignore_errors=True)
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        _why_not[version] = f"pip install verl=={version} --no-deps --target failed (no package index?): {last}"
        return None
    (staging / ".complete").write_text(marker, encoding="utf-8")
    if target.exists() and _read(target / ".complete") != marker:
        shutil.rmtree(target, ignore_errors=True)  # an older, unmarked install: replaced by this complete one
    try:
        os.replace(staging, target)
    except OSError:  # another process published it first
        shutil.rmtree(staging, ignore_errors=True)
    return target if _read(target / ".complete") == marker else None


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except OSError:
        return None


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
