"""Scan log bytes into run state, failure hits and phase marks, fast.

A verl log is mostly lines nothing cares about (vLLM INFO, worker warnings). One combined
pattern (RE2, a linear-time automaton; Python's `re` when RE2 is missing) finds the few
lines that can carry an event, a failure or a phase; only those are decoded and looked at
closely. Line numbers are counted with `bytes.count`, so nothing is split into lines that
is not needed.

Two modes. `eager` (following a live log) turns every progress and metric line into an
event as it comes. Otherwise (reading a finished log once) those two kinds, one or two per
step, are not searched line by line: only the last progress bar and the last metric lines of
each block are kept and parsed at the end, which is all the final state needs.
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from verl_deploy.watch.events import (ANSI, EVENT_MARKERS, METRIC_LINE, Metrics, Progress, clean, parse_line,
                                      parse_segment)
from verl_deploy.watch.signatures import (FailureClass, Signature, SignatureTable, alternation, fast_compile,
                                          load_table)
from verl_deploy.watch.state import HISTORY, RunState
from verl_deploy.watch.trends import AT_END, PER_STEP

try:
    import re2 as _re2
except ImportError:  # pragma: no cover - see signatures.fast_compile
    _re2 = None

# plain substrings that every line carrying an event contains (`in` is far cheaper than a search)
EVENT_NEEDLES = ("Training Progress:", "step:", "View run at", "swanlab watch", "local_global_step_folder:",
                 "Setting global step to", "Total training steps:")
PER_STEP_MARKERS = (r"Training Progress:", r"step:\d+ - ")  # in EVENT_MARKERS; left to the tail pass when not eager
MAX_LINE_TEXT = 2000  # characters kept of one matching line
HITS_KEPT = 10  # lines kept per signature
PHASE_WINDOW = 150  # lines either side of a failure where the phase is looked for


def one_line(exc: BaseException) -> str:
    """`ValueError: message`, bounded: what a record or a notice says about an exception."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text[:200]}" if text else type(exc).__name__


@dataclass(frozen=True)
class FailureSeen:
    """A failure signature matched (and reached its min_count) on this line."""

    class_id: str
    line: int
    text: str
    severity: str


@dataclass(frozen=True)
class Stalled:
    step: int
    seconds: float


@dataclass(frozen=True)
class LineSkipped:
    """A line the watcher could not read (a number no run writes, a value out of every bound): skipped, counted."""

    line: int | None  # None: a metric or progress line of the tail pass (its number is not counted there)
    why: str


@dataclass
class Hit:
    line: int
    text: str


@dataclass
class SignatureHits:
    failure: FailureClass
    signature: Signature
    count: int = 0
    hits: list[Hit] = field(default_factory=list)

    @property
    def counted(self) -> bool:
        return self.count >= self.signature.min_count


@dataclass
class PhaseMark:
    line: int
    phase: str
    wrapper: bool  # named by a Ray wrapper (`ray::WorkerDict.<method>`): the surest phase


def prefilter_sources(table: SignatureTable, *, eager: bool) -> list[str]:
    """What a line must contain to be looked at closely (anchors dropped: lines still carry Ray prefixes)."""
    markers = [m for m in EVENT_MARKERS if eager or m not in PER_STEP_MARKERS]
    return [source.lstrip("^") for source in table.pattern_sources()] + markers


def _last_lines(block: bytes, marker: bytes, accept: Callable[[str], bool], limit: int) -> list[str]:
    """The last `limit` lines of `block` that contain `marker` and pass `accept`, oldest first."""
    found: list[str] = []
    end = len(block)
    while len(found) < limit:
        at = block.rfind(marker, 0, end)
        if at < 0:
            break
        start = block.rfind(b"\n", 0, at) + 1
        stop = block.find(b"\n", at)
        line = block[start:stop if stop >= 0 else len(block)].decode("utf-8", errors="replace")
        if accept(line):
            found.append(line)
        end = start
    return found[::-1]


def _span_finder(pattern) -> Callable[[bytes, int, int], tuple[int, int] | None]:
    """(start, end) of the next match in bytes. With RE2, straight from the automaton: the wrapper's
    match object costs more than the search itself when nearly every line matches (a failure-dense log)."""
    regexp, anchor = getattr(pattern, "_regexp", None), getattr(getattr(_re2, "_Anchor", None), "UNANCHORED", None)
    if regexp is not None and anchor is not None and hasattr(regexp, "Match"):
        def find(block: bytes, pos: int, end: int) -> tuple[int, int] | None:
            span = regexp.Match(anchor, block, pos, end)[0]
            return None if span[0] < 0 else span
        return find

    def find_plain(block: bytes, pos: int, end: int) -> tuple[int, int] | None:
        match = pattern.search(block, pos, end)
        return None if match is None else match.span()
    return find_plain


class LogScanner:
    """Feed it blocks of complete lines; it keeps the run state and what went wrong where."""

    def __init__(self, table: SignatureTable | None = None, *, eager: bool = True,
                 on_event: Callable[[object], None] | None = None, clock: Callable[[], float] = time.monotonic):
        self.table = table or load_table()
        self.eager = eager
        self.prefilter = fast_compile(alternation(prefilter_sources(self.table, eager=eager)).encode())
        self._find = _span_finder(self.prefilter)
        self.state = RunState()
        self._last_progress: str | None = None
        self._last_metric_lines: deque[str] = deque(maxlen=HISTORY)
        self.lines = 0
        self.signature_hits: dict[tuple[str, int], SignatureHits] = {}
        self.first_hit_line: dict[str, int] = {}
        self.recent_marks: deque[PhaseMark] = deque(maxlen=400)
        self.marks_near: dict[str, list[PhaseMark]] = {}
        self.on_event = on_event or (lambda event: None)
        self.clock = clock
        self.last_step_at = clock()
        self._stall_reported_for: int | None = None
        self.skipped = 0  # lines that could not be read (see LineSkipped); they never stop the scan
        self.first_skipped: LineSkipped | None = None
        self.position = 0  # byte offset, in the block being fed, of the line being looked at

    # -- input ---------------------------------------------------------------------------------

    def feed(self, block: bytes) -> None:
        """A block of complete lines (the last may lack its newline only at end of input)."""
        find = self._find
        pos, counted_to, lines_before = 0, 0, 0
        size = len(block)
        while pos < size:
            span = find(block, pos, size)
            if span is None:
                break
            start = block.rfind(b"\n", 0, span[0]) + 1
            end = block.find(b"\n", span[1])
            if end < 0:
                end = size
            lines_before += block.count(b"\n", counted_to, start)
            counted_to = start
            self.position = start
            number = self.lines + lines_before + 1
            try:
                self._line(number, block[start:end])
            except Exception as exc:  # noqa: BLE001 - one line never stops the watch
                self.skip(number, exc)
            pos = end + 1
        self.position = size
        self.lines += block.count(b"\n")
        if block and not block.endswith(b"\n"):
            self.lines += 1
        if not self.eager:
            self._keep_tail(block)

    def _keep_tail(self, block: bytes) -> None:
        progress = _last_lines(block, b"Training Progress:", lambda line: True, 1)
        if progress:
            self._last_progress = progress[0]
        self._last_metric_lines.extend(
            _last_lines(block, b"step:", lambda line: bool(METRIC_LINE.search(line)), HISTORY))

    def finish(self) -> RunState:
        """After the last block: parse what the tail pass kept (no-op when eager)."""
        for line in [*self._last_metric_lines, *([self._last_progress] if self._last_progress else [])]:
            try:
                for event in parse_line(line):
                    self.state.apply(event)
                    if isinstance(event, Metrics):
                        self._trends(PER_STEP, self.lines)
            except Exception as exc:  # noqa: BLE001 - counted like any unreadable line
                self.skip(None, exc)
        self._last_metric_lines.clear()
        self._last_progress = None
        self._trends(AT_END, self.lines)
        return self.state

    def feed_lines(self, lines: list[str]) -> None:
        if lines:
            self.feed(("\n".join(lines) + "\n").encode("utf-8", errors="replace"))

    def peek_partial(self, partial: bytes) -> None:
        """tqdm redraws its bar with \\r and no newline: read the bar from the unfinished line."""
        if b"Training Progress" not in partial:
            return
        for segment in clean(partial[-4096:].decode("utf-8", errors="replace"))[-2:]:
            try:
                events = parse_segment(segment)
            except Exception:  # noqa: BLE001 - an unfinished line: counted once it is complete
                continue
            for event in events:
                if isinstance(event, Progress) and event.step > self.state.step:
                    self.state.apply(event)
                    self.last_step_at = self.clock()
                    self.on_event(event)

    def skip(self, number: int | None, exc: BaseException) -> None:
        """Count a line that could not be read; the first one is kept with why (for status and diagnose)."""
        self.skipped += 1
        if self.first_skipped is None:
            self.first_skipped = LineSkipped(number, one_line(exc))

    # -- one interesting line ------------------------------------------------------------------

    def _line(self, number: int, raw: bytes) -> None:
        text = raw.decode("utf-8", errors="replace")
        if "step:" not in text or not METRIC_LINE.search(text):  # metric keys (timing_s/update_actor) are not phases
            phase = self.table.phase_in(ANSI.sub("", text))
            if phase:
                self._mark(PhaseMark(number, phase.id, "ray::" in text))
        may_carry_event = any(needle in text for needle in EVENT_NEEDLES)  # most failure lines carry none
        for segment in clean(text):
            if may_carry_event:
                step_before = self.state.step
                for event in parse_segment(segment):
                    if self.eager or not isinstance(event, (Progress, Metrics)):  # else: the tail pass has them
                        self.state.apply(event)
                        self.on_event(event)
                        if isinstance(event, Metrics):
                            self._trends(PER_STEP, number)
                if self.state.step > step_before:
                    self.last_step_at = self.clock()
            for failure, signature in self.table.failures_in(segment):
                self._hit(number, segment, failure, signature)


    def _trends(self, checks: dict, number: int) -> None:
        """Trend classes (watch/trends.py): a finding becomes a hit of the class like a matched line."""
        for failure in self.table.trend_classes():
            check = checks.get(failure.trend)
            seen = check(self.state) if check else None
            if seen:
                self._hit(number, seen, failure, failure.trend_signature)

    def _hit(self, number: int, text: str, failure: FailureClass, signature: Signature) -> None:
        index = -1 if signature is failure.trend_signature else self._signature_number(failure, signature)
        key = (failure.id, index)
        entry = self.signature_hits.setdefault(key, SignatureHits(failure, signature))
        entry.count += 1
        if len(entry.hits) < HITS_KEPT:
            entry.hits.append(Hit(number, text[:MAX_LINE_TEXT]))
        if failure.id not in self.first_hit_line:
            self.first_hit_line[failure.id] = number
            self.marks_near[failure.id] = [m for m in self.recent_marks if m.line >= number - PHASE_WINDOW]
        if entry.count == signature.min_count:  # once per signature, when it starts to count
            self.on_event(FailureSeen(failure.id, number, text[:MAX_LINE_TEXT], signature.severity))

    def _signature_number(self, failure: FailureClass, signature: Signature) -> int:
        numbers = self.__dict__.setdefault("_numbers", {})  # by identity: comparing signatures is slow
        if id(signature) not in numbers:
            numbers[id(signature)] = next(n for n, s in enumerate(failure.signatures) if s is signature)
        return numbers[id(signature)]

    def _mark(self, mark: PhaseMark) -> None:
        self.recent_marks.append(mark)
        for class_id, first in self.first_hit_line.items():
            if mark.line <= first + PHASE_WINDOW:
                self.marks_near[class_id].append(mark)

    # -- time ----------------------------------------------------------------------------------

    def check_stall(self, *, min_seconds: float = 600, factor: float = 5) -> Stalled | None:
        """No new step for max(min_seconds, factor x median step time): reported once per stall."""
        median = self.state.median_step_seconds or 0
        limit = max(min_seconds, factor * median)
        waited = self.clock() - self.last_step_at
        if waited < limit or self._stall_reported_for == self.state.step:
            return None
        self._stall_reported_for = self.state.step
        stalled = Stalled(self.state.step, waited)
        self.on_event(stalled)
        return stalled
