"""Shared test helpers: the verl config cache, stub `python3`/`ray` on PATH, running the real CLI."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
# verl's wheels are fetched once per machine into this cache (real configs, no verl code run).
os.environ.setdefault("VERL_DEPLOY_CACHE_DIR", str(ROOT / ".pytest_cache" / "verl-deploy"))
# Facts a developer's own `verl-deploy check` saved must not leak into the tests' plans.
os.environ["VERL_DEPLOY_STATE_DIR"] = tempfile.mkdtemp(prefix="verl-deploy-state-")
for name in list(os.environ):
    if name in {"FRAMEWORK", "MODEL_PATH", "TRAIN_FILE", "VAL_FILE", "TEST_FILE", "TRAIN_STEPS", "TRAINER_GPUS",
                "ROLLOUT_GPUS", "USER_FEATURES", "MAX_OOM_RETRIES", "MAX_RESPONSE_LENGTH", "ENABLE_OFFLOAD",
                "SWANLAB_HOST", "SWANLAB_API_KEY", "CONTAINER", "CKPTS_DIR", "PROJECT_NAME", "SWANLAB_MODE",
                "SWANLAB_WORKSPACE", "SWANLAB_LOG_DIR"}:
        del os.environ[name]

VERL_BIN = [sys.executable, "-m", "verl_deploy"]

STUB_PYTHON = """#!/usr/bin/env bash
# stands in for verl's python3: records argv (NUL separated), cwd and environment
printf '%s\\0' "$@" > "$STUB_LOG/python3.argv"
pwd > "$STUB_LOG/python3.cwd"
env > "$STUB_LOG/python3.env"
exit "${STUB_EXIT:-0}"
"""
STUB_RAY = """#!/usr/bin/env bash
# stands in for ray: records each call; `ray status` says no cluster unless STUB_RAY_UP=1
printf '%s\\n' "$*" >> "$STUB_LOG/ray.calls"
if [ "$1" = status ]; then [ "${STUB_RAY_UP:-0}" = 1 ]; exit $?; fi
exit 0
"""


def run_cli(*args: str, env: dict | None = None, input: str | None = None, cwd: Path | None = None):
    """Run the real `verl-deploy` in a subprocess, as a user would."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    full_env.setdefault("COLUMNS", "200")
    return subprocess.run([*VERL_BIN, *args], capture_output=True, text=True, env=full_env, input=input,
                          cwd=cwd, timeout=240)


@pytest.fixture()
def stubs(tmp_path: Path):
    """A PATH with stub python3 and ray, a log dir, and a fake verl source root with recipe files."""
    bin_dir = tmp_path / "stub-bin"
    bin_dir.mkdir()
    for name, text in (("python3", STUB_PYTHON), ("ray", STUB_RAY)):
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)
    log = tmp_path / "stub-log"
    log.mkdir()
    verl_root = tmp_path / "verl-root"
    for module in ("recipe/dapo/main_dapo.py", "recipe/one_step_off_policy/main_ppo.py"):
        (verl_root / module).parent.mkdir(parents=True, exist_ok=True)
        (verl_root / module).write_text("")
    return {"bin": bin_dir, "log": log, "verl_root": verl_root}


def run_scripts(out_dir: Path, stubs: dict, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": f"{stubs['bin']}:{os.environ['PATH']}", "STUB_LOG": str(stubs["log"]), "HOME": str(out_dir)}
    env.update(extra_env or {})
    return subprocess.run(["bash", str(out_dir / "start_verl.sh")], capture_output=True, text=True, env=env,
                          timeout=120)


def recorded_argv(stubs: dict) -> list[str]:
    raw = (stubs["log"] / "python3.argv").read_bytes().decode()
    return raw.split("\0")[:-1]


def load_plan(out_dir: Path) -> dict:
    return json.loads((out_dir / "plan.json").read_text())


def has_shellcheck() -> bool:
    return shutil.which("shellcheck") is not None
