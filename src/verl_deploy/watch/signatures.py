"""The failure-signature table: loads signatures.yaml once and compiles it.

The table is data (signatures.yaml) so a new failure kind is a few lines of YAML, not code.
This module only turns it into compiled patterns and answers two questions about a line:
which failure classes it shows, and which training phase it names.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from importlib import resources
from typing import Any

import yaml

try:  # RE2: a linear-time automaton, so one search for ~170 alternatives stays fast on long lines.
    import re2 as _re2
except ImportError:  # pragma: no cover - google-re2 is a dependency; `re` gives the same answers, slower
    _re2 = None


def fast_compile(source: str | bytes):
    """An alternation of many patterns compiled with RE2 when present, else with `re`."""
    if _re2 is None:
        return re.compile(source)
    options = _re2.Options()
    options.max_mem = 64 << 20
    return _re2.compile(source, options)


@dataclass(frozen=True)
class Signature:
    pattern: re.Pattern
    severity: str = "fatal"  # or "warning": the run may go on
    min_count: int = 1
    retryable: bool | None = None  # None: the class decides
    note: str = ""
    unless: re.Pattern | None = None

    def matches(self, text: str) -> bool:
        return bool(self.pattern.search(text)) and not (self.unless and self.unless.search(text))


@dataclass(frozen=True)
class FailureClass:
    id: str
    title: str
    cause: str
    fix: str
    retryable: bool
    default_phase: str | None
    signatures: tuple[Signature, ...]
    trend: str | None = None  # a check in watch/trends.py: no single line shows this class, the run's course does
    trend_signature: Signature | None = None  # stands for the trend in hits (severity, note)


@dataclass(frozen=True)
class Phase:
    id: str
    label: str
    pattern: re.Pattern


@dataclass(frozen=True)
class SignatureTable:
    classes: tuple[FailureClass, ...]  # precedence order
    phases: tuple[Phase, ...]
    benign: re.Pattern
    phase_context: re.Pattern
    any_failure: Any  # one compiled alternation (RE2 or re), to reject most lines with one search
    # RE2::Set of every signature pattern: one pass over a line says which of them match, so a
    # failure-dense log costs one automaton run per line instead of one search per signature
    signature_set: Any = None
    set_index: tuple[tuple[int, int], ...] = ()  # set pattern number -> (class number, signature number)
    phase_set: Any = None  # the same for the phases: pattern number = phase number

    def failure_class(self, class_id: str) -> FailureClass:
        return next(c for c in self.classes if c.id == class_id)

    def failures_in(self, text: str) -> list[tuple[FailureClass, Signature]]:
        """Each class this line shows, with the first of its signatures that matched."""
        if self.signature_set is not None:
            return self._failures_by_set(text)
        if not self.any_failure.search(text) or self.benign.search(text):
            return []
        found = []
        for failure in self.classes:
            for signature in failure.signatures:
                if signature.matches(text):
                    found.append((failure, signature))
                    break
        return found

    def _failures_by_set(self, text: str) -> list[tuple[FailureClass, Signature]]:
        matched = self.signature_set.Match(text)
        if not matched or self.benign.search(text):
            return []
        found: list[tuple[FailureClass, Signature]] = []
        done_class = -1
        for class_n, signature_n in sorted(self.set_index[i] for i in matched):  # precedence, then table order
            if class_n == done_class:
                continue
            failure = self.classes[class_n]
            signature = failure.signatures[signature_n]
            if signature.unless is None or not signature.unless.search(text):
                found.append((failure, signature))
                done_class = class_n
        return found

    def phase_in(self, text: str) -> Phase | None:
        """The phase a raw line (Ray prefix included) names, if it is an error-context line."""
        if self.phase_set is not None:  # the phase first: most lines name none, and RE2 says so fastest
            matched = self.phase_set.Match(text)
            return self.phases[min(matched)] if matched and self.phase_context.search(text) else None
        if not self.phase_context.search(text):
            return None
        for phase in self.phases:
            if phase.pattern.search(text):
                return phase
        return None

    def phase_label(self, phase_id: str | None) -> str | None:
        return next((p.label for p in self.phases if p.id == phase_id), None)

    def trend_classes(self) -> tuple[FailureClass, ...]:
        return tuple(c for c in self.classes if c.trend)

    def pattern_sources(self) -> list[str]:
        """Every failure and phase regex: what a line must contain to be looked at closely."""
        sources = [s.pattern.pattern for c in self.classes for s in c.signatures]
        return sources + [p.pattern.pattern for p in self.phases]


def alternation(sources: list[str]) -> str:
    return "|".join(f"(?:{source})" for source in sources)


def _signature(raw: dict) -> Signature:
    return Signature(
        pattern=re.compile(raw["match"]),
        severity=raw.get("severity", "fatal"),
        min_count=int(raw.get("min_count", 1)),
        retryable=raw.get("retryable"),
        note=raw.get("note", ""),
        unless=re.compile(raw["unless"]) if raw.get("unless") else None,
    )


NEVER = re.compile(r"\A(?!)")  # a trend class's stand-in pattern: never matches a line


def _trend_signature(raw: dict) -> Signature | None:
    if not raw.get("trend"):
        return None
    return Signature(pattern=NEVER, severity=raw.get("severity", "warning"), note=raw.get("note", ""))


def build_table(data: dict) -> SignatureTable:
    classes = tuple(
        FailureClass(
            id=raw["id"], title=raw["title"], cause=raw["cause"], fix=raw["fix"],
            retryable=bool(raw["retryable"]), default_phase=raw.get("phase"),
            signatures=tuple(_signature(s) for s in raw.get("signatures") or ()),
            trend=raw.get("trend"), trend_signature=_trend_signature(raw),
        )
        for raw in data["classes"]
    )
    phases = tuple(
        Phase(raw["id"], raw["label"], re.compile(alternation(raw["markers"]))) for raw in data["phases"]
    )
    failure_sources = [s.pattern.pattern for c in classes for s in c.signatures]
    signature_set, set_index = _signature_set(classes)
    phase_set, _ = _pattern_set([p.pattern.pattern for p in phases])
    return SignatureTable(
        classes=classes,
        phases=phases,
        benign=re.compile(alternation(data["benign"])),
        phase_context=re.compile(data["phase_context"]),
        any_failure=fast_compile(alternation(failure_sources)),
        signature_set=signature_set,
        set_index=set_index,
        phase_set=phase_set,
    )


def _signature_set(classes: tuple[FailureClass, ...]) -> tuple[object, tuple[tuple[int, int], ...]]:
    """An RE2::Set of all signatures (None without RE2: then each signature is searched in turn)."""
    index = tuple((class_n, signature_n) for class_n, failure in enumerate(classes)
                  for signature_n in range(len(failure.signatures)))
    return _pattern_set([s.pattern.pattern for c in classes for s in c.signatures])[0], index


def _pattern_set(sources: list[str]) -> tuple[object, int]:
    if _re2 is None:
        return None, 0
    options = _re2.Options()
    options.max_mem = 64 << 20
    patterns = _re2.Set.SearchSet(options)
    for source in sources:
        patterns.Add(source)
    patterns.Compile()
    return patterns, len(sources)


@functools.lru_cache(maxsize=1)
def load_table() -> SignatureTable:
    text = resources.files("verl_deploy.watch").joinpath("signatures.yaml").read_text(encoding="utf-8")
    return build_table(yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)))  # libyaml if built
