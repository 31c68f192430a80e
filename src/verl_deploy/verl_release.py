"""Which verl release will run, read from the tree the training runs from.

The plan must use the profile of the verl that will run: a 0.9.0 checkout planned with the
default 0.7.0 profile failed on keys 0.9 had renamed, and a checkout of verl's main branch was
planned with 0.7.0's legacy DAPO entry. verl keeps its version in ``verl/version/version``; at the
v0.7.0 and v0.8.0 tags that file says ``0.7.0.dev`` / ``0.8.0.dev``, so a ``.dev`` suffix alone does
not mark an unreleased tree: a version is unknown when no profile serves its release.
"""

from __future__ import annotations

import functools
import os
import re
from pathlib import Path
from typing import Any, Mapping

from verl_deploy import boundedread
from verl_deploy.boundedread import UnreadableFile

VERSION_FILE = Path("verl") / "version" / "version"
_VERSION = re.compile(r"v?\d+\.\d+(\.\d+)?([.\-+]?\w+)*")
_PRE_RELEASE = re.compile(r"(\.?dev\d*|rc\d*|a\d+|b\d+|\.post\d*)$")


def release_of(version: str) -> str:
    """'0.7.0.dev' -> '0.7.0', 'v0.9.1+npu' -> '0.9.1': the release a version names."""
    text = version.strip().lstrip("v").split("+")[0]
    return _PRE_RELEASE.sub("", text)


@functools.lru_cache(maxsize=256)  # a plan asks ~500 times, for a handful of strings
def release_numbers(version: str) -> tuple[int, int, int]:
    """'0.9.1.dev' -> (0, 9, 1), '0.9.' -> (0, 9, 0); missing or unreadable parts are 0. The one reader of a
    version's numbers (profiles pick by them, rules compare releases with them)."""
    parts: list[int] = []
    for piece in release_of(version).split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit()) if piece[:1].isdigit() else ""
        if not digits:
            break
        parts.append(int(digits))
    padded = (parts + [0, 0, 0])[:3]
    return padded[0], padded[1], padded[2]


def checkout_version(directory: str | os.PathLike) -> str | None:
    """The version in DIRECTORY/verl/version/version, or None where there is no readable one."""
    try:
        text = boundedread.read_text(Path(directory) / VERSION_FILE, 256).strip()
    except (OSError, UnreadableFile, UnicodeDecodeError):
        return None
    return text if _VERSION.fullmatch(text) else None


def tree_that_runs(values: Mapping[str, Any], sources: Mapping[str, str]) -> str | None:
    """The verl tree on this host the training will run from: --verl-dir, or --run-dir without a container.

    With a container, --run-dir is a path inside it (the container's verl is read by `check`).
    """
    if values.get("verl_dir"):
        return os.path.expanduser(str(values["verl_dir"]))
    given_run_dir = sources.get("run_dir", "default") not in ("default", "detected")
    if values.get("run_dir") and given_run_dir and not values.get("container"):
        return os.path.expanduser(str(values["run_dir"]))
    return None


def version_that_runs(values: Mapping[str, Any], sources: Mapping[str, str]) -> tuple[str, str] | None:
    """(version, the file it was read from) for the verl the training runs from, when it is on this host."""
    tree = tree_that_runs(values, sources)
    if tree is None:
        return None
    version = checkout_version(tree)
    return (version, str(Path(tree) / VERSION_FILE)) if version else None
