"""Drive a scanner from a file or a pipe: once to the end, or following it as it grows."""

from __future__ import annotations

import time
from typing import Callable

from verl_deploy.watch.follow import LogFollower, StreamReader
from verl_deploy.watch.scan import LogScanner


def scan_to_end(reader: LogFollower | StreamReader, scanner: LogScanner) -> None:
    """Everything written so far, including an unfinished last line."""
    while True:
        block = reader.read_block()
        if block:
            scanner.feed(block)
        elif isinstance(reader, LogFollower) or reader.eof:
            break
    scanner.feed(reader.take_partial())


def follow(reader: LogFollower | StreamReader, scanner: LogScanner, *, poll: float = 0.1,
           stop: Callable[[], bool] = lambda: False, idle_exit: float | None = None,
           stall_seconds: float = 600) -> None:
    """Feed new lines as they come until `stop()`, end of a pipe, or `idle_exit` seconds without a byte."""
    last_data, last_offset = time.monotonic(), getattr(reader, "offset", 0)
    while not stop():
        block = reader.read_block()
        offset = getattr(reader, "offset", 0)
        if block or offset != last_offset:
            last_data, last_offset = time.monotonic(), offset
        if block:
            scanner.feed(block)
            continue
        if isinstance(reader, StreamReader) and reader.eof:
            break
        if reader.partial:
            scanner.peek_partial(reader.partial)
        scanner.check_stall(min_seconds=stall_seconds)
        if idle_exit is not None and time.monotonic() - last_data >= idle_exit:
            break
        time.sleep(poll)
    scanner.feed(reader.take_partial())
