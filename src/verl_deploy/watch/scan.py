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

import re
import sys
import time
from collections import deque
from dataclasses import dataclass, field
from typing import Callable

from verl_deploy.watch.events import (ANSI, EVENT_MARKERS, METRIC_LINE, Metrics, Progress, clean, parse_line,
                                      parse_segment)
from verl_deploy.watch.handover import HANDOVER
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
                 "Setting global step to", "Total training steps:", "Final validation metrics:",
                 "\"'val-", "View run ", "ClearML results page:", "Saving tensorboard log to")
PER_STEP_MARKERS = (r"Training Progress:", r"step:\d+ - ")  # in EVENT_MARKERS; left to the tail pass when not eager
MAX_LINE_TEXT = 2000  # characters kept of one matching line
HITS_KEPT = 10  # lines kept per signature
PHASE_WINDOW = 150  # lines either side of a failure where the phase is looked for
GUARDED = frozenset({"device_oom"})  # diagnosis.GUARDS: the verdict reads every kept line of these classes
HANDOVER_MARKER = re.escape(HANDOVER)  # run_training.sh's last line before the trainer: what came before was survived


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


def prefilter_sources(table: SignatureTable, *, eager: bool, saturated: frozenset = frozenset(),
                      phases: bool = True) -> list[str]:
    """What a line must contain to be looked at closely (anchors dropped: lines still carry Ray prefixes).

    `saturated` signatures ((class id, signature number) already counted and holding HITS_KEPT lines) are left
    out: a line only they match would change nothing, so the automaton passes over it without Python seeing it.
    Without `phases`, lines that only name a training phase are passed over too (their marks are read back
    when a failure first shows, see LogScanner._marks_before).
    """
    markers = [m for m in EVENT_MARKERS if eager or m not in PER_STEP_MARKERS]
    signatures = [s.pattern.pattern for c in table.classes for n, s in enumerate(c.signatures)
                  if (c.id, n) not in saturated]
    phase_sources = [p.pattern.pattern for p in table.phases] if phases else []
    return [source.lstrip("^") for source in signatures + phase_sources] + markers + [HANDOVER_MARKER]


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
                 on_event: Callable[[object], None] | None = None, clock: Callable[[], float] = time.monotonic,
                 exact: bool = False):
        self.table = table or load_table()
        self.eager = eager
        self._saturated: set[tuple[str, int]] = set()
        # exact: every line a signature or phase matches is looked at (the reference the fast path is tested against)
        self._exact = exact
        self._compiled_for: tuple = ()  # (saturated signatures, phases on) of the prefilter in use
        self._prefilters: dict[tuple, Callable] = {}
        # phases are looked for up to this line: PHASE_WINDOW after the last first hit (always when exact)
        self._phase_until = sys.maxsize if exact else 0
        self._block: bytes | None = None  # the block being fed, for reading back the lines before a first hit
        self._tail = b""  # the last PHASE_WINDOW + 1 lines fed, for the same when a block starts
        self.state = RunState()
        self._last_progress: str | None = None
        self._last_metric_lines: deque[str] = deque(maxlen=HISTORY)
        self.lines = 0
        self._compile_prefilter()
        self.signature_hits: dict[tuple[str, int], SignatureHits] = {}
        self.first_hit_line: dict[str, int] = {}
        self.marks_near: dict[str, list[PhaseMark]] = {}
        self.on_event = on_event or (lambda event: None)
        self.clock = clock
        self.last_step_at = clock()
        self._stall_reported_for: int | None = None
        self.skipped = 0  # lines that could not be read (see LineSkipped); they never stop the scan
        self.first_skipped: LineSkipped | None = None
        self.position = 0  # byte offset, in the block being fed, of the line being looked at
        self.handover_line: int | None = None  # the last line where verl-deploy's scripts handed over to the training
        self._reported_at: dict[tuple[str, int], int] = {}  # signature -> the line its last FailureSeen came from

    def _compile_prefilter(self) -> None:
        """The one combined search over every signature not yet saturated, the phases and the event markers.

        A failure-dense log saturates its signatures within its first lines; from then on its lines are
        passed over at the automaton's speed, like a healthy log's (each recompile is well under 1 ms)."""
        key = (frozenset(self._saturated), self._phases_wanted())
        if key == self._compiled_for:
            return
        if key not in self._prefilters:
            sources = prefilter_sources(self.table, eager=self.eager, saturated=key[0], phases=key[1])
            self._prefilters[key] = _span_finder(fast_compile(alternation(sources).encode()))
        self._find = self._prefilters[key]
        self._compiled_for = key

    def _phases_wanted(self, number: int | None = None) -> bool:
        return (self.lines if number is None else number) < self._phase_until

    # -- input ---------------------------------------------------------------------------------

    def feed(self, block: bytes) -> None:
        """A block of complete lines (the last may lack its newline only at end of input)."""
        self._compile_prefilter()
        find = self._find
        compiled_for = self._compiled_for
        self._block = block
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
            if len(self._saturated) != len(compiled_for[0]) or self._phases_wanted(number) != compiled_for[1]:
                self._compile_prefilter_at(number)  # a signature saturated, or a phase window opened or closed
                find, compiled_for = self._find, self._compiled_for
        self.position = size
        self._block = None
        self.lines += block.count(b"\n")
        if block and not block.endswith(b"\n"):
            self.lines += 1
        self._keep_last_lines(block)
        if not self.eager:
            self._keep_tail(block)

    def _compile_prefilter_at(self, number: int) -> None:
        lines, self.lines = self.lines, number
        try:
            self._compile_prefilter()
        finally:
            self.lines = lines

    def _keep_last_lines(self, block: bytes) -> None:
        """The last PHASE_WINDOW + 1 lines of everything fed (bounded bytes)."""
        data = block if block.count(b"\n", max(0, len(block) - (1 << 20))) > PHASE_WINDOW + 1 else self._tail + block
        cut = len(data)
        for _ in range(PHASE_WINDOW + 2):
            cut = data.rfind(b"\n", 0, cut)
            if cut < 0:
                break
        self._tail = data[cut + 1:][-(1 << 20):]

    def _marks_before(self, number: int) -> list[PhaseMark]:
        """Phase marks of line `number` and the PHASE_WINDOW lines before it, read back from the block being
        fed (the current line starts at `position`) and the kept last lines of earlier blocks."""
        raw: list[bytes] = []
        if self._block is not None:
            block, pos = self._block, self.position
            end = block.find(b"\n", pos)
            raw.append(block[pos:end if end >= 0 else len(block)])
            while len(raw) <= PHASE_WINDOW and pos > 0:
                start = block.rfind(b"\n", 0, pos - 1) + 1
                raw.append(block[start:pos - 1])
                pos = start
            more = pos == 0
        else:
            more = True
        if more and len(raw) <= PHASE_WINDOW:
            earlier = self._tail[:-1] if self._tail.endswith(b"\n") else self._tail
            raw.extend(earlier.split(b"\n")[::-1][:PHASE_WINDOW + 1 - len(raw)] if earlier else [])
        marks = []
        for back, line in enumerate(raw):
            mark = self._phase_mark(number - back, line.decode("utf-8", errors="replace"))
            if mark:
                marks.append(mark)
        return marks[::-1]

    def _phase_mark(self, number: int, text: str) -> PhaseMark | None:
        if "step:" in text and METRIC_LINE.search(text):  # metric keys (timing_s/update_actor) are not phases
            return None
        phase = self.table.phase_in(ANSI.sub("", text))
        return PhaseMark(number, phase.id, "ray::" in text) if phase else None

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
        if HANDOVER in text:
            self.handover_line = number
            self._saturated.clear()  # what the scripts printed before is no reason to stop looking at the training
        if number <= self._phase_until:  # else: read back if a failure first shows within PHASE_WINDOW lines
            mark = self._phase_mark(number, text)
            if mark:
                self._mark(mark)
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
            if seen and failure.trend_signature is not None:  # a trend class always has one
                self._hit(number, seen, failure, failure.trend_signature)

    def _hit(self, number: int, text: str, failure: FailureClass, signature: Signature) -> None:
        index = -1 if signature is failure.trend_signature else self._signature_number(failure, signature)
        key = (failure.id, index)
        entry = self.signature_hits.setdefault(key, SignatureHits(failure, signature))
        entry.count += 1
        if len(entry.hits) < HITS_KEPT:
            entry.hits.append(Hit(number, text[:MAX_LINE_TEXT]))
        elif index >= 0 and entry.counted and not self._exact and key not in self._saturated:
            self._saturated.add(key)  # nothing more to learn from lines only this signature matches
            self._saturated.update(self._redundant_in(failure))
        if failure.id not in self.first_hit_line:
            self.first_hit_line[failure.id] = number
            self.marks_near[failure.id] = self._marks_before(number)
            self._phase_until = max(self._phase_until, number + PHASE_WINDOW) if not self._exact else sys.maxsize
        reported = self._reported_at.get(key)
        again = reported is not None and self.handover_line is not None and reported < self.handover_line
        # once per signature, when it starts to count; again when the training prints one that came before the
        # scripts handed over (that one was survived: this one is the training's own)
        if entry.count == signature.min_count or (again and entry.count > signature.min_count):
            self._reported_at[key] = number
            self.on_event(FailureSeen(failure.id, number, text[:MAX_LINE_TEXT], signature.severity))

    def _redundant_in(self, failure: FailureClass) -> list[tuple[str, int]]:
        """Signatures of a class that already has a saturated one and whose hit would change no verdict.

        A later hit of such a signature could only add lines after the ten kept (never shown: the verdict
        shows the earliest), a count nobody reads, and a severity, retry override or note it does not
        have. Classes whose verdict reads every kept line (GUARDED) are left exact.
        """
        if failure.id in GUARDED:
            return []
        saturated = [s for n, s in enumerate(failure.signatures) if (failure.id, n) in self._saturated]
        fatal = any(s.severity == "fatal" for s in saturated)
        return [(failure.id, n) for n, s in enumerate(failure.signatures)
                if s.retryable is None and not s.note and (s.severity != "fatal" or fatal)]

    def _signature_number(self, failure: FailureClass, signature: Signature) -> int:
        numbers = self.__dict__.setdefault("_numbers", {})  # by identity: comparing signatures is slow
        if id(signature) not in numbers:
            numbers[id(signature)] = next(n for n, s in enumerate(failure.signatures) if s is signature)
        return numbers[id(signature)]

    def _mark(self, mark: PhaseMark) -> None:
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
