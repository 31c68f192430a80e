"""Where verl-deploy keeps what outlives one command, by the XDG conventions (each overridable for tests)."""

from __future__ import annotations

import os
from pathlib import Path


def user_dir(override: str, xdg: str, fallback: str) -> Path:
    """$override, else $xdg/verl-deploy, else ~/fallback/verl-deploy."""
    if os.environ.get(override):
        return Path(os.environ[override])
    base = os.environ.get(xdg) or os.path.join(os.path.expanduser("~"), fallback)
    return Path(base) / "verl-deploy"


def state_dir() -> Path:
    """Detected facts and run records."""
    return user_dir("VERL_DEPLOY_STATE_DIR", "XDG_STATE_HOME", ".local/state")


def config_dir() -> Path:
    """The SwanLab key file."""
    return user_dir("VERL_DEPLOY_CONFIG_DIR", "XDG_CONFIG_HOME", ".config")


def cache_dir() -> Path:
    """verl wheels and config indexes."""
    return user_dir("VERL_DEPLOY_CACHE_DIR", "XDG_CACHE_HOME", ".cache")
