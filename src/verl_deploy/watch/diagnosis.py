"""From what a scan saw to one verdict: the root-cause class, its phase, cause, fix and retry.

Precedence is the order of classes in signatures.yaml: a collective timeout on one rank is
usually the symptom of an OOM on another, and a Ray `ActorDiedError` the symptom of almost
anything, so the first class in that order wins and the others are listed as secondary.
One exception: a fatal line printed before verl-deploy's scripts handed over to the training
was survived (the scripts exit on a failure they cannot retry; `ray start` is tried again), so
it ranks after every fatal line the training printed, whatever their classes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from verl_deploy.textnumbers import float_or_none
from verl_deploy.watch.scan import GUARDED, Hit, LineSkipped, LogScanner, PhaseMark, SignatureHits

LINES_SHOWN = 8

SIZE = r"([\d.]{1,40})\s*([KMGTPE]i?B)"
TRIED = re.compile(r"Tried to allocate " + SIZE)
TOTAL = re.compile(r"total capacity of " + SIZE + r"|" + SIZE + r" total capacity")
FREE = re.compile(r"of which " + SIZE + r" is free|" + SIZE + r" free")
RESERVED = re.compile(SIZE + r" reserved in total by PyTorch|allocated memory " + SIZE + r" is allocated by PyTorch")
UNIT = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40, "P": 2**50, "E": 2**60}


@dataclass
class Diagnosis:
    class_id: str | None = None
    title: str | None = None
    severity: str | None = None
    phase: str | None = None
    phase_label: str | None = None
    cause: str | None = None
    fix: str | None = None
    retryable: bool | None = None
    lines: list[Hit] = field(default_factory=list)
    secondary: list[str] = field(default_factory=list)  # the other classes seen, in precedence order
    secondary_warnings: list[str] = field(default_factory=list)  # of those: warnings only (no symptom of a failure)
    secondary_survived: list[str] = field(default_factory=list)  # of those: fatal lines the scripts went on past
    step: int = 0
    total_steps: int | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    swanlab_url: str | None = None
    last_checkpoint_step: int | None = None
    validation: dict = field(default_factory=dict)  # RunState.validation: {"step", "final", "metrics"}
    lines_read: int = 0
    lines_skipped: int = 0  # lines the watcher could not read (skipped, never fatal)
    first_skipped: LineSkipped | None = None
    survived: bool = False  # the class's every line came before the scripts handed over to the training

    @property
    def failed(self) -> bool:
        """A fatal line the training printed (not one the scripts survived before handing over): it outranks what
        the backend, a signal or the scheduler say."""
        return self.severity == "fatal" and not self.survived

    def line_dicts(self, limit: int | None = None) -> list[dict]:
        """The lines that show the verdict, as records and JSON keep them ({"line", "text"})."""
        return [{"line": hit.line, "text": hit.text} for hit in self.lines[:limit]]

    def as_dict(self) -> dict:
        return {
            "class": self.class_id,
            "title": self.title,
            "severity": self.severity,
            "phase": self.phase,
            "cause": self.cause,
            "fix": self.fix,
            "retryable": self.retryable,
            "survived": self.survived,
            "lines": self.line_dicts(),
            "secondary": self.secondary,
            "secondary_warnings": self.secondary_warnings,
            "secondary_survived": self.secondary_survived,
            "step": self.step,
            "total_steps": self.total_steps,
            "metrics": {key: _json_number(value) for key, value in self.metrics.items()},
            "swanlab_url": self.swanlab_url,
            "validation": self.validation or None,
            "last_checkpoint_step": self.last_checkpoint_step,
            "lines_read": self.lines_read,
            "lines_skipped": self.lines_skipped,
            "first_skipped": None if self.first_skipped is None else {"line": self.first_skipped.line,
                                                                      "why": self.first_skipped.why},
        }


def _json_number(value: float) -> float | str:
    """JSON has no NaN/Infinity; say them as strings rather than emit invalid JSON."""
    return value if value == value and value not in (float("inf"), float("-inf")) else str(value)


def _bytes(match: re.Match | None) -> float | None:
    if not match:
        return None
    groups = [g for g in match.groups() if g is not None]
    number, unit = float_or_none(groups[0], finite=True), groups[1]
    return None if number is None else number * UNIT.get(unit[0], 1)


def oom_guard(lines: list[Hit]) -> tuple[bool | None, str]:
    """Device OOMs that another offload step will not fix (failures.md, device_oom guards)."""
    for hit in lines:
        tried, total = _bytes(TRIED.search(hit.text)), _bytes(TOTAL.search(hit.text))
        free, reserved = _bytes(FREE.search(hit.text)), _bytes(RESERVED.search(hit.text))
        if tried and total and tried > total:
            return False, "The requested size is larger than the whole device: a corrupted size, not a real OOM — do not retry."
        if total and free is not None and reserved is not None and free < 0.05 * total and reserved < 0.5 * total:
            return False, (
                "This process holds little of the card yet almost nothing is free: another process is using the "
                "device (a stale run or a second job). Clear it (npu-smi info / nvidia-smi) instead of offloading.")
    return None, ""


GUARDS = {"device_oom": oom_guard}
assert set(GUARDS) <= GUARDED, "a guarded class must be in scan.GUARDED (its kept lines stay exact)"


def _phase(marks: list[PhaseMark], root: int) -> str | None:
    if not marks:
        return None
    wrappers = [m for m in marks if m.wrapper]
    pool = wrappers or marks
    return min(pool, key=lambda m: (abs(m.line - root), -m.line)).phase


def diagnose(scanner: LogScanner) -> Diagnosis:
    """What the log says: progress and metrics, and the root failure (the first fatal class, else the first
    class seen) with its phase, cause, fix, whether a retry can help and the lines that show it."""
    state = scanner.finish()
    result = Diagnosis(step=state.step, total_steps=state.total_steps, metrics=dict(state.metrics),
                       swanlab_url=state.swanlab_url, last_checkpoint_step=state.last_checkpoint_step,
                       validation=dict(state.validation), lines_read=scanner.lines, lines_skipped=scanner.skipped,
                       first_skipped=scanner.first_skipped)
    counted: dict[str, list[SignatureHits]] = {}
    for entry in scanner.signature_hits.values():
        if entry.counted:
            counted.setdefault(entry.failure.id, []).append(entry)
    if not counted:
        return result

    order, chosen, fatal_classes, survived_classes = _rank(scanner, counted)
    fatal = chosen in fatal_classes
    survived = chosen in survived_classes
    failure = scanner.table.failure_class(chosen)
    entries = sorted(counted[chosen], key=lambda e: e.hits[0].line)
    hits = sorted((hit for e in entries for hit in e.hits), key=lambda h: h.line)
    could_retry, notes = _retry_and_notes(chosen, failure.retryable, entries, hits)
    retryable: bool | None = None if survived else could_retry  # a survived line did not end the run: no word on it
    result.survived = survived
    if survived:
        notes.append(f"These lines came before the scripts handed over to the training (line {scanner.handover_line}) "
                     "and the scripts went on past them: on one node they did not end the run; with several nodes, "
                     "look at the node that printed them.")
    elif fatal and survived_classes:
        notes.append(f"Before the scripts handed over to the training (line {scanner.handover_line}) the log also "
                     f"shows {', '.join(c for c in order if c in survived_classes)}, which the scripts went on past; "
                     "with several nodes, one node's failure there can be the cause of this one.")
    phase = _phase(scanner.marks_near.get(chosen, []), hits[0].line) or failure.default_phase
    result.class_id, result.title, result.severity = chosen, failure.title, "fatal" if fatal else "warning"
    result.phase, result.phase_label = phase, scanner.table.phase_label(phase)
    result.cause = " ".join([failure.cause, *dict.fromkeys(notes)])
    result.fix, result.retryable = failure.fix, retryable
    result.lines = hits[:LINES_SHOWN]
    result.secondary = [c for c in order if c != chosen]
    result.secondary_warnings = [c for c in result.secondary if c not in fatal_classes]
    result.secondary_survived = [c for c in result.secondary if c in survived_classes]
    return result


def _rank(scanner: LogScanner, counted: dict[str, list[SignatureHits]]) -> tuple[list[str], str, set[str], set[str]]:
    """(the classes seen in precedence order, the chosen one, the fatal classes, the fatal classes the scripts
    survived).

    The chosen class is the first fatal one the training printed, else the first fatal one the scripts survived
    (printed before the hand-over), else the first class seen."""
    order = [c.id for c in scanner.table.classes if c.id in counted]
    fatal = [c for c in order if any(e.signature.severity == "fatal" for e in counted[c])]
    survived = {c for c in fatal if all(_before(entry, scanner.handover_line) for entry in counted[c])}
    chosen = ([c for c in fatal if c not in survived] or fatal or order)[0]
    return order, chosen, set(fatal), survived


def _before(entry: SignatureHits, handover_line: int | None) -> bool:
    """Every line of this signature came before the hand-over (only known while all its lines are kept)."""
    return (handover_line is not None and entry.count == len(entry.hits)
            and all(hit.line < handover_line for hit in entry.hits))


def _retry_and_notes(chosen: str, class_retryable: bool, entries: list[SignatureHits],
                     hits: list) -> tuple[bool, list[str]]:
    """Whether a retry can help (a signature's own say wins over its class's, a guard's over both), and the
    signatures' and the guard's notes."""
    retry_overrides = [e.signature.retryable for e in entries if e.signature.retryable is not None]
    retryable = False if False in retry_overrides else (True if retry_overrides else class_retryable)
    notes = [e.signature.note for e in entries if e.signature.note]
    guard = GUARDS.get(chosen)
    if guard:
        guarded, note = guard(hits)
        if guarded is not None:
            retryable = guarded
            notes.append(note)
    return retryable, notes
