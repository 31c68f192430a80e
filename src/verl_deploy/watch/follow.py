"""Follow a log file as it grows, reading only new bytes.

Survives the file being truncated (reads again from the start of the new content) or
replaced by rotation (a new inode: the new file is read from its start). Memory stays
bounded by the chunk size plus one partial line, whatever the file's size. Polling is used
instead of inotify: it works the same on bind mounts and network file systems, where
inotify events from other hosts or containers do not arrive.
"""

from __future__ import annotations

import os
import time
from typing import Callable, Iterator

CHUNK = 1 << 20  # 1 MiB
MAX_PARTIAL = 1 << 20  # a "line" longer than this is cut, so one bad line cannot eat memory


class LogFollower:
    def __init__(self, path: str | os.PathLike, *, start_at_end: bool = False, offset: int = 0):
        self.path = os.fspath(path)
        self.offset = offset
        self._inode: int | None = None
        self._partial = b""
        self.line_number = 0
        if start_at_end:
            try:
                self.offset = os.stat(self.path).st_size
            except FileNotFoundError:
                self.offset = 0

    def _check_replaced(self, stat: os.stat_result) -> None:
        if self._inode is not None and stat.st_ino != self._inode:
            self.offset, self._partial = 0, b""  # rotated: a new file
        elif stat.st_size < self.offset:
            self.offset, self._partial = 0, b""  # truncated
        self._inode = stat.st_ino

    def read_lines(self) -> list[str]:
        """The complete lines written since the last call (a trailing partial line waits)."""
        try:
            stat = os.stat(self.path)
        except FileNotFoundError:
            return []
        self._check_replaced(stat)
        if stat.st_size == self.offset:
            return []
        lines: list[str] = []
        with open(self.path, "rb") as handle:
            handle.seek(self.offset)
            while True:
                chunk = handle.read(CHUNK)
                if not chunk:
                    break
                self.offset += len(chunk)
                data = self._partial + chunk
                parts = data.split(b"\n")
                self._partial = parts.pop()[-MAX_PARTIAL:]
                for raw in parts:
                    self.line_number += 1
                    lines.append(raw.decode("utf-8", errors="replace").rstrip("\r"))
                if len(lines) >= 10_000:
                    break  # hand back a batch; the rest is read on the next call
        return lines

    def follow(self, *, poll: float = 0.1, stop: Callable[[], bool] = lambda: False) -> Iterator[str]:
        """Yield lines as they are written until `stop()` is true."""
        while True:
            lines = self.read_lines()
            yield from lines
            if stop():
                return
            if not lines:
                time.sleep(poll)
