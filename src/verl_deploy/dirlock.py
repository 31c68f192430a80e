"""An exclusive flock on a directory itself: no lock file is left behind, and closing the descriptor releases it.

`generate` holds one on the output directory's parent while it replaces the script set; `status` holds one on a
run's folder while it checks for a supervisor and starts one."""

from __future__ import annotations

import contextlib
import fcntl
import os
import time
from pathlib import Path
from typing import Iterator


@contextlib.contextmanager
def locked_directory(path: Path, *, wait: float | None = None) -> Iterator[bool]:
    """Yields True once the lock is held: waits as long as it takes, or with `wait` seconds given, yields False
    when they pass first. An unopenable directory raises OSError on entry."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if wait is None:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield True
            return
        deadline = time.monotonic() + wait
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    yield False
                    return
                time.sleep(0.05)
        yield True
    finally:
        os.close(fd)
