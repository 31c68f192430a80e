"""Reading a file verl-deploy did not just write: a run record, detected.json, the key file, a host
file, a model's config.json. Any of them may be a FIFO, /dev/zero, a directory, huge, not UTF-8 or
JSON nested deeper than the parser's stack; each of those ends here as one UnreadableFile line.

Non-regular files are refused after a non-blocking open (a FIFO with no writer never blocks us),
at most `limit` bytes are read whatever the file claims its size is, and json's RecursionError /
MemoryError count as "damaged" like any other bad JSON.
"""

from __future__ import annotations

import json
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

MAX_PLAN_BYTES = 16 << 20  # an attempt's plan.json: tens of KiB when we wrote it

KIND = {stat.S_IFIFO: "a FIFO", stat.S_IFCHR: "a character device", stat.S_IFBLK: "a block device",
        stat.S_IFDIR: "a directory", stat.S_IFSOCK: "a socket"}


class UnreadableFile(ValueError):
    """One line saying what is wrong with the file; the caller adds the field and the fix."""


@contextmanager
def _regular_file(path: str | os.PathLike, name: str) -> Iterator[tuple[int, os.stat_result]]:
    """(fd, stat) of a regular file opened without blocking (a FIFO with no writer cannot hold us);
    UnreadableFile for anything else or an OS error; FileNotFoundError passes through."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as exc:
        raise UnreadableFile(f"{name} cannot be read: {exc.strerror or exc}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise UnreadableFile(f"{name} is {KIND.get(stat.S_IFMT(info.st_mode), 'not a regular file')}, "
                                 "not a regular file")
        os.set_blocking(fd, True)
        yield fd, info
    except OSError as exc:
        raise UnreadableFile(f"{name} cannot be read: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


def read_bytes(path: str | os.PathLike, limit: int, label: str | None = None, *, head: bool = False) -> bytes:
    """At most `limit` bytes of a regular file; UnreadableFile for anything else (FileNotFoundError passes through).
    A file larger than `limit` is refused, or with `head` its first `limit` bytes are returned (a log's start)."""
    name = label or str(path)
    with _regular_file(path, name) as (fd, info):
        if info.st_size > limit and not head:
            raise UnreadableFile(f"{name} is {info.st_size} bytes, over the {limit}-byte limit")
        chunks, total = [], 0
        while total <= limit:
            chunk = os.read(fd, min(1 << 20, limit + 1 - total))
            if not chunk:
                break
            chunks.append(chunk)
            total += len(chunk)
    if total > limit and head:
        return b"".join(chunks)[:limit]
    if total > limit:  # it grew while we read
        raise UnreadableFile(f"{name} grew over the {limit}-byte limit while being read")
    return b"".join(chunks)


def read_tail(path: str | os.PathLike, limit: int, label: str | None = None) -> bytes:
    """The last `limit` bytes of a regular file (a log's end); UnreadableFile for a FIFO, device or directory."""
    with _regular_file(path, label or str(path)) as (fd, info):
        start = max(0, info.st_size - limit)
        return os.pread(fd, info.st_size - start, start)


def decode(raw: bytes, name: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UnreadableFile(f"{name} is not UTF-8 text (byte {exc.start})") from None


def read_text(path: str | os.PathLike, limit: int, label: str | None = None) -> str:
    """A regular UTF-8 text file of at most `limit` bytes."""
    return decode(read_bytes(path, limit, label), label or str(path))


def read_line(stream: IO, limit: int, label: str) -> str:
    """One line of a stream (stdin) of at most `limit` bytes, without reading the rest of an endless stream."""
    source = getattr(stream, "buffer", stream)
    raw = source.readline(limit + 1)
    if isinstance(raw, str):
        raw = raw.encode("utf-8", "surrogateescape")
    if len(raw.rstrip(b"\r\n")) > limit:
        raise UnreadableFile(f"{label} is longer than {limit} bytes")
    return decode(raw, label)


def parse_json(raw: bytes | str, label: str) -> Any:
    """JSON, or UnreadableFile: bad syntax, bad bytes and nesting too deep for the parser are all 'damaged'."""
    try:
        return json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        lineno = getattr(exc, "lineno", None)
        where = f" at line {lineno}" if lineno else ""
        raise UnreadableFile(f"{label} is truncated or not JSON{where}") from None
    except RecursionError:
        raise UnreadableFile(f"{label} is damaged: JSON nested too deep to read") from None
    except MemoryError:
        raise UnreadableFile(f"{label} is damaged: too large to parse") from None


def read_json(path: str | os.PathLike, limit: int, label: str | None = None) -> Any:
    """A JSON file of at most `limit` bytes, or UnreadableFile (FileNotFoundError passes through)."""
    name = label or str(path)
    return parse_json(read_bytes(Path(path), limit, name), name)
