"""Writing values in Hydra's override grammar so that verl receives them unchanged.

Two layers read a quoted override value: Hydra's parser (a run of backslashes before a
quote, or at the end, is halved; an odd one escapes the quote) and then OmegaConf's
interpolation (``${...}`` is resolved unless escaped as ``\\${``, with the same halving of
backslashes before it). ``quote`` undoes both, so any string without control characters
arrives as written. run_training.sh carries the same algorithm as the shell function
``hq`` (see templates/run_training.sh.j2); the tests hold the two to each other.
"""

from __future__ import annotations

import re
from typing import Any

_PLAIN = re.compile(r"[A-Za-z_][A-Za-z0-9_\-./]*")
_RESERVED = {"true", "false", "null", "none", "nan", "inf", "-inf", "+inf"}


def quote(text: str) -> str:
    """Encode `text` as a single-quoted Hydra string that OmegaConf resolves back to `text`."""
    out: list[str] = []
    backslashes = 0
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            backslashes += 1
            i += 1
            continue
        if ch == "'":
            out.append("\\" * (2 * backslashes + 1) + "'")
        elif ch == "$" and text[i + 1:i + 2] == "{":
            out.append("\\" * (2 * backslashes + 1) + "$")
        else:
            out.append("\\" * backslashes + ch)
        backslashes = 0
        i += 1
    out.append("\\" * (2 * backslashes))
    return "'" + "".join(out) + "'"


def format_value(value: Any) -> str:
    """Python value -> Hydra override value text."""
    if isinstance(value, bool):
        return "True" if value else "False"
    if value is None:
        return "null"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _RESERVED:
        return text
    return quote(text)
