"""Where verl-deploy keeps what outlives one command, by the XDG conventions (each overridable for tests)."""

from __future__ import annotations

import json
import os
import tempfile
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO, Iterator


class UnusableDir(Exception):
    """A directory of ours that cannot be one (a regular file is in the way): one line, naming the variable."""

    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.fix = fix

    def finding(self):
        from verl_deploy.findings import error

        return error("directory", str(self), self.fix)


def user_dir(override: str, xdg: str, fallback: str) -> Path:
    """$override, else $xdg/verl-deploy, else ~/fallback/verl-deploy; UnusableDir when a file is in the way."""
    if os.environ.get(override):
        path, named = Path(os.environ[override]), f"${override}"
    else:
        base = os.environ.get(xdg) or os.path.join(os.path.expanduser("~"), fallback)
        path, named = Path(base) / "verl-deploy", f"${xdg}" if os.environ.get(xdg) else f"~/{fallback}"
    _check_usable(path, named, override)
    return path


def _check_usable(path: Path, named: str, override: str) -> None:
    """The path, or its nearest existing parent, must be a directory (else every write fails with a traceback)."""
    here = path
    while True:
        try:
            is_dir = here.is_dir()
            exists = is_dir or os.path.lexists(here)
        except OSError:  # a name too long, a loop: left to the operation that uses it
            return
        if exists:
            if not is_dir:
                what = "" if here == path else f" (its parent {str(here)!r})"
                raise UnusableDir(f"{str(path)!r}{what} is not a directory: a file is in the way (from {named})",
                                  f"point {override} at a directory, or move the file away"
                                  + (f" (or set {named[1:]} to a directory)" if named.startswith("$X") else ""))
            return
        if here.parent == here:
            return
        here = here.parent


def state_dir() -> Path:
    """Detected facts and run records."""
    return user_dir("VERL_DEPLOY_STATE_DIR", "XDG_STATE_HOME", ".local/state")


def config_dir() -> Path:
    """The SwanLab key file."""
    return user_dir("VERL_DEPLOY_CONFIG_DIR", "XDG_CONFIG_HOME", ".config")


def cache_dir() -> Path:
    """verl wheels and config indexes."""
    return user_dir("VERL_DEPLOY_CACHE_DIR", "XDG_CACHE_HOME", ".cache")


@contextmanager
def atomic_file(path: Path) -> Iterator[BinaryIO]:
    """A binary file to write that appears at `path` whole or not at all: a temp file beside it (0600, as mkstemp
    makes it), fsync, rename; a reader sees the old or the new file, never a part, and no temp file is left."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "wb") as handle:
            yield handle
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_json(path: Path, data: Any) -> None:
    """JSON written with atomic_file: run records and the small state files a backend's pump keeps
    (scheduler.json)."""
    text = json.dumps(data, indent=2, default=str) + "\n"
    with atomic_file(path) as handle:
        handle.write(text.encode("utf-8"))
