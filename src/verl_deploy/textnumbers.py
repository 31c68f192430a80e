"""Numbers read from text we did not write (a training's log, a file a tool left), bounded.

Python's `int()` refuses more than 4300 digits with a ValueError, and a step of 10**400 would
later overflow a float; `float()` accepts `1e999` as inf and many spellings a log never means.
Every number taken from such text goes through here: at most `digits` digits (or `chars`
characters for a float), else `NotANumber` (a ValueError), so a caller skips the value or the
line and never dies on it.
"""

from __future__ import annotations

import math
import re

MAX_INT_DIGITS = 18  # a step, a size, a pid: far beyond any real value, far below int's limit and 2**63
MAX_FLOAT_CHARS = 64
_INT = re.compile(r"[-+]?\d{1,%d}" % MAX_INT_DIGITS)
_FLOAT = re.compile(r"[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?|nan|inf(?:inity)?)", re.IGNORECASE)


class NotANumber(ValueError):
    """Text that is not a number within the bounds (too many digits, not a number at all)."""


def int_of(text: str | bytes, *, digits: int = MAX_INT_DIGITS) -> int:
    """A decimal integer of at most `digits` digits (surrounding spaces allowed), else NotANumber."""
    if isinstance(text, bytes):
        text = text.decode("ascii", errors="replace")
    stripped = text.strip()
    if len(stripped) > digits + 1 or not _INT.fullmatch(stripped) or len(stripped.lstrip("+-")) > digits:
        raise NotANumber(f"not an integer of at most {digits} digits: {_shown(stripped)}")
    return int(stripped)


def float_of(text: str, *, chars: int = MAX_FLOAT_CHARS, finite: bool = False) -> float:
    """A decimal float written in at most `chars` characters (nan/inf allowed unless `finite`), else NotANumber."""
    stripped = text.strip()
    if len(stripped) > chars or not _FLOAT.fullmatch(stripped):
        raise NotANumber(f"not a number of at most {chars} characters: {_shown(stripped)}")
    value = float(stripped)
    if finite and not math.isfinite(value):
        raise NotANumber(f"not a finite number: {_shown(stripped)}")
    return value


def int_or_none(text: str | bytes | None, *, digits: int = MAX_INT_DIGITS) -> int | None:
    try:
        return None if text is None else int_of(text, digits=digits)
    except NotANumber:
        return None


def float_or_none(text: str | None, *, chars: int = MAX_FLOAT_CHARS, finite: bool = False) -> float | None:
    try:
        return None if text is None else float_of(text, chars=chars, finite=finite)
    except NotANumber:
        return None


def _shown(text: str) -> str:
    return repr(text if len(text) <= 40 else text[:20] + f"...({len(text)} characters)")
