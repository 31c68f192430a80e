"""Follow a log file as it grows, reading only new bytes.

Survives the file being truncated (reads again from the start of the new content) or
replaced by rotation (a new inode: the new file is read from its start). Memory stays
bounded by the block size plus one partial line, whatever the file's size. Polling is used
instead of inotify: it works the same on bind mounts and network file systems, where
inotify events from other hosts or containers do not arrive.
"""

from __future__ import annotations

import os
import stat
import time
from typing import BinaryIO, Callable, Iterator

from verl_deploy.boundedread import KIND

BLOCK = 4 << 20  # bytes read per call
MAX_PARTIAL = 1 << 20  # a "line" longer than this keeps only its tail, so one bad line cannot eat memory


class LogFollower:
    def __init__(self, path: str | os.PathLike, *, start_at_end: bool = False, offset: int = 0):
        self.path = os.fspath(path)
        self.offset = offset  # everything before this byte has been handed out
        self.partial = b""  # the unfinished last line, as of the last read (for peeking at a tqdm bar)
        self._inode: int | None = None
        self.problem: str | None = None  # why the path cannot be read as a log (a directory, a FIFO), if it cannot
        if start_at_end:
            try:
                self.offset = os.stat(self.path).st_size
            except FileNotFoundError:
                self.offset = 0

    def _check_replaced(self, stat: os.stat_result) -> None:
        if self._inode is not None and stat.st_ino != self._inode:
            self.offset, self.partial = 0, b""  # rotated: a new file
        elif stat.st_size < self.offset:
            self.offset, self.partial = 0, b""  # truncated
        self._inode = stat.st_ino

    def _read(self, limit: int) -> bytes:
        """New bytes, or b"" — also when the path is not a regular file (a directory, a FIFO): then
        `problem` says so, and nothing blocks on a FIFO with no writer."""
        try:
            fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
        except FileNotFoundError:
            return b""
        except OSError as exc:
            self.problem = f"{self.path} cannot be read: {exc.strerror or exc}"
            return b""
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                self.problem = f"{self.path} is {KIND.get(stat.S_IFMT(info.st_mode), 'not a regular file')}, not a log file"
                return b""
            self.problem = None
            self._check_replaced(info)
            if info.st_size == self.offset:
                return b""
            return os.pread(fd, limit, self.offset)
        except OSError as exc:
            self.problem = f"{self.path} cannot be read: {exc.strerror or exc}"
            return b""
        finally:
            os.close(fd)

    def read_block(self, limit: int = BLOCK) -> bytes:
        """Complete lines written since the last call (at most `limit` bytes; b"" if none).

        An unfinished last line stays in the file and is read again next time, so no bytes are
        copied between calls; a single line longer than `limit` is cut into pieces.
        """
        chunk = self._read(limit)
        cut = chunk.rfind(b"\n") + 1
        if cut == 0 and len(chunk) >= limit:
            self.offset += len(chunk)
            return chunk + b"\n"
        self.partial = chunk[cut:][-MAX_PARTIAL:]
        self.offset += cut
        return chunk if cut == len(chunk) else chunk[:cut]

    def take_partial(self) -> bytes:
        """The unfinished last line, handed out once the writer is known to be done."""
        rest = self._read(MAX_PARTIAL)
        self.offset += len(rest)
        self.partial = b""
        return rest

    def read_lines(self) -> list[str]:
        """The complete lines written since the last call (a trailing partial line waits)."""
        block = self.read_block()
        return [line.rstrip("\r") for line in block.decode("utf-8", errors="replace").split("\n")[:-1]]

    def follow(self, *, poll: float = 0.1, stop: Callable[[], bool] = lambda: False) -> Iterator[str]:
        """Yield lines as they are written until `stop()` is true."""
        while True:
            lines = self.read_lines()
            yield from lines
            if stop():
                return
            if not lines:
                time.sleep(poll)


class StreamReader:
    """The same block interface over a pipe (stdin): blocks of complete lines until EOF."""

    def __init__(self, stream: BinaryIO):
        self.stream = stream
        self.partial = b""
        self.eof = False

    def read_block(self, limit: int = BLOCK) -> bytes:
        read = getattr(self.stream, "read1", self.stream.read)
        chunk = read(limit)
        if not chunk:
            self.eof = True
            return b""
        data = self.partial + chunk
        cut = data.rfind(b"\n") + 1
        self.partial = data[cut:][-MAX_PARTIAL:]
        return data[:cut]

    def take_partial(self) -> bytes:
        partial, self.partial = self.partial, b""
        return partial
