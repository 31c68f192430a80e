"""What the static bash reader learns from a script: argv words after expansion, the commands, the
variables, and what it could not know (each with its line)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Unknown:
    """A value that cannot be known without running the script: why, and where."""

    why: str
    line: int

    def __str__(self) -> str:
        return f"<unknown: {self.why}>"


@dataclass
class Word:
    """One argv word after expansion; `unknown` lists what made part of it unknowable."""

    text: str
    line: int
    unknown: list[Unknown] = field(default_factory=list)


@dataclass
class Command:
    """A simple command after expansion: its words and the line it starts on."""

    words: list[Word]
    line: int
    env: dict[str, str]  # the exported variables at that point (known values only)


@dataclass
class Reading:
    """Everything the reader learned from one script."""

    path: str
    commands: list[Command] = field(default_factory=list)
    # name -> str | list[str | Unknown] (an array) | Unknown
    variables: dict[str, Any] = field(default_factory=dict)
    assigned_at: dict[str, int] = field(default_factory=dict)
    exported: set[str] = field(default_factory=set)
    # variables read but never set in the script: name -> (line, the default the script used or None)
    environment: dict[str, tuple[int, str | None]] = field(default_factory=dict)
    unreadable: list[Unknown] = field(default_factory=list)
    functions: dict[str, Any] = field(default_factory=dict)  # name -> (the walker of its file, its body node)

    def note(self, why: str, line: int) -> Unknown:
        unknown = Unknown(why, line)
        if unknown not in self.unreadable:
            self.unreadable.append(unknown)
        return unknown


class ScriptProblem(Exception):
    """The script cannot be read at all (missing, too large, not text)."""
