"""What of a log a maintainer needs, bounded whatever its size: the verdict, its head, its tail and every
error line with the lines around it.

The log is read once, in blocks (watch/follow.py: a FIFO or a directory in its place is refused,
memory stays bounded), fed to the watcher's scanner for the verdict, and searched line by line for
error words. A 60 MB log gives a few hundred KB: lines are cut at MAX_LINE characters, one window
of context holds at most MAX_WINDOW lines, the first windows are kept up to FIRST_BUDGET characters
and the last ones up to LAST_BUDGET (the root cause is usually first, the final error last); what
was left out between them is counted and said.
"""

from __future__ import annotations

import re
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from verl_deploy.watch.diagnosis import Diagnosis, diagnose
from verl_deploy.watch.follow import LogFollower
from verl_deploy.watch.scan import LogScanner

ERROR_WORDS = re.compile(rb"Error|ERROR|OOM|Exception|Traceback|FATAL|Fatal|[Ff]ailed|Killed|[Tt]imed out|Timeout")
CONTEXT = 5  # lines kept before and after an error line
MAX_LINE = 600  # characters kept of one line (a tqdm line of 100,000 refreshes is one "line")
MAX_WINDOW = 120  # lines in one window; a storm of errors starts new windows
FIRST_BUDGET = 1_200_000  # characters of the first windows
LAST_BUDGET = 400_000  # characters of the last windows
HEAD_LINES, TAIL_LINES = 80, 200


def cut(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace").rstrip("\r")
    if "\r" in text:  # a progress bar redrawn in place: its last state
        text = text.rsplit("\r", 1)[-1]
    if len(text) > MAX_LINE:
        return text[:MAX_LINE] + f" …({len(text) - MAX_LINE} more characters)"
    return text


@dataclass
class Window:
    lines: list[tuple[int, str]] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(len(text) + 10 for _, text in self.lines)

    def text(self) -> str:
        return "\n".join(f"{number:>8}: {text}" for number, text in self.lines)


@dataclass
class LogExcerpt:
    diagnosis: Diagnosis
    lines: int = 0
    bytes: int = 0
    problem: str | None = None  # why the log could not be read, if it could not
    head: list[str] = field(default_factory=list)
    tail: list[tuple[int, str]] = field(default_factory=list)
    first: list[Window] = field(default_factory=list)
    last: deque = field(default_factory=deque)
    dropped: int = 0  # windows left out between the first and the last ones
    error_lines: int = 0

    def errors_text(self) -> str:
        parts = [w.text() for w in self.first]
        if self.dropped:
            parts.append(f"   … {self.dropped} more window(s) of error lines left out (the bundle keeps the first "
                         f"and the last ones) …")
        parts += [w.text() for w in self.last]
        return "\n--\n".join(parts) + ("\n" if parts else "")

    def tail_text(self) -> str:
        return "".join(f"{number:>8}: {text}\n" for number, text in self.tail)


class _Collector:
    def __init__(self, excerpt: LogExcerpt):
        self.excerpt = excerpt
        self.before: deque[tuple[int, str]] = deque(maxlen=CONTEXT)
        self.window: Window | None = None
        self.after = 0
        self.first_size = 0
        self.last_size = 0

    def line(self, number: int, raw: bytes) -> None:
        excerpt = self.excerpt
        if number <= HEAD_LINES:
            excerpt.head.append(cut(raw))
        matched = ERROR_WORDS.search(raw) is not None
        if matched or self.after > 0:
            text = cut(raw)
            excerpt.tail.append((number, text))
            if matched:
                excerpt.error_lines += 1
            if self.window is None or len(self.window.lines) >= MAX_WINDOW:
                self._close()
                self.window = Window(list(self.before))
            self.window.lines.append((number, text))
            self.before.clear()
            self.after = CONTEXT if matched else self.after - 1
            if self.after == 0:
                self._close()
            return
        entry = (number, cut(raw))
        self.before.append(entry)
        excerpt.tail.append(entry)

    def _close(self) -> None:
        window, self.window = self.window, None
        if window is None or not window.lines:
            return
        excerpt, size = self.excerpt, window.size
        if self.first_size + size <= FIRST_BUDGET and not excerpt.dropped and not excerpt.last:
            excerpt.first.append(window)
            self.first_size += size
            return
        excerpt.last.append(window)
        self.last_size += size
        while self.last_size > LAST_BUDGET and excerpt.last:
            self.last_size -= excerpt.last.popleft().size
            excerpt.dropped += 1

    def finish(self) -> None:
        self._close()


def excerpt_log(path: str | Path) -> LogExcerpt:
    """Read the log once: its verdict, head, tail and error windows, all bounded."""
    scanner = LogScanner(eager=False)
    excerpt = LogExcerpt(Diagnosis())
    excerpt.tail = deque(maxlen=TAIL_LINES)  # type: ignore[assignment]
    collector = _Collector(excerpt)
    follower = LogFollower(path)
    number = 0
    while True:
        block = follower.read_block()
        if not block:
            block = follower.take_partial()
            if not block:
                break
            block += b"\n"
        excerpt.bytes += len(block)
        scanner.feed(block)
        lines = block.split(b"\n")
        for raw in lines[:-1]:
            number += 1
            collector.line(number, raw)
    collector.finish()
    excerpt.problem = follower.problem
    excerpt.lines = number
    excerpt.tail = list(excerpt.tail)
    excerpt.diagnosis = diagnose(scanner)
    return excerpt
