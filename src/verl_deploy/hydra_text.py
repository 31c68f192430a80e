"""Writing values in Hydra's override grammar so that verl receives them unchanged.

Two layers read a quoted override value: Hydra's parser (a run of backslashes before a
quote, or at the end, is halved; an odd one escapes the quote) and then OmegaConf's
interpolation (``${...}`` is resolved unless escaped as ``\\${``, with the same halving of
backslashes before it). ``quote`` undoes both, so any string without control characters
arrives as written. run_training.sh carries the same algorithm as the shell function
``hq`` (see templates/run_training.sh.j2); the tests hold the two to each other.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
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


# --- reading a user's override: Hydra's own parser decides -------------------------------

MAX_OVERRIDE_CHARS = 10_000
_SYNTAX_FIX = ("write KEY=VALUE in Hydra syntax: close every [ ] { } and quote, quote special characters "
               "(key='my value'), ~KEY deletes, +KEY=V adds, ++KEY=V adds or sets")


class OverrideSyntaxError(ValueError):
    """A user override Hydra would refuse; `fix` says how to write it."""

    def __init__(self, message: str, fix: str = _SYNTAX_FIX):
        super().__init__(message)
        self.fix = fix


@dataclass(frozen=True)
class UserOverride:
    """A parsed `[~|+|++]KEY[=VALUE]`; `value` is the user's value text, verbatim (None: `~KEY`)."""

    prefix: str
    key: str
    value: str | None


@functools.lru_cache(maxsize=1)
def _parser():
    from hydra.core.override_parser.overrides_parser import OverridesParser

    return OverridesParser.create()


def parse_override(text: object) -> UserOverride:
    """Parse one override with Hydra's grammar (hydra-core's OverridesParser); one-line errors."""
    if not isinstance(text, str):
        raise OverrideSyntaxError(f"{text!r} is a {type(text).__name__}, not KEY=VALUE text",
                                  "write each override as a string KEY=VALUE, e.g. trainer.save_freq=20")
    return _parse_text(text)


@functools.lru_cache(maxsize=8192)
def _parse_text(text: str) -> UserOverride:
    """Hydra's ANTLR parser takes ~0.5 ms an override and `import` reads the same ones many times: kept per text
    (the result is frozen; a refusal is raised again each time, not kept)."""
    shown = text if len(text) <= 80 else text[:77] + "..."
    if len(text) > MAX_OVERRIDE_CHARS:
        raise OverrideSyntaxError(f"{shown!r} is {len(text)} characters long (at most {MAX_OVERRIDE_CHARS})",
                                  "shorten the value, or set it in a verl config file")
    if re.search(r"[\x00-\x1f\x7f]", text):
        raise OverrideSyntaxError(f"{shown!r} contains a control character (newline, tab, ...)",
                                  "write the override on one line without control characters")
    if "=" not in text and not text.startswith("~"):
        raise OverrideSyntaxError(f"{shown!r} is not KEY=VALUE",
                                  "write KEY=VALUE, e.g. trainer.save_freq=20 (or ~KEY to delete a key)")
    from hydra.core.override_parser.types import OverrideType
    from hydra.errors import HydraException

    try:
        parsed = _parser().parse_override(text)
    except HydraException as exc:  # OverrideParseException is one of these
        reason = (str(exc).strip().splitlines() or ["syntax error"])[0]
        raise OverrideSyntaxError(f"{shown!r} is not valid Hydra syntax: {reason}") from None
    if parsed.is_sweep_override():
        raise OverrideSyntaxError(f"{shown!r} is a sweep (a comma list), which a single run cannot take",
                                  "write lists in brackets: key=[a,b]")
    if not parsed.key_or_group:
        raise OverrideSyntaxError(f"{shown!r} has no config key", "write KEY=VALUE, e.g. trainer.save_freq=20")
    if parsed.package is not None:
        raise OverrideSyntaxError(f"{shown!r} names a config group package (@), which verl-deploy does not pass on",
                                  "set the keys themselves: KEY=VALUE, e.g. trainer.save_freq=20")
    prefix = {OverrideType.DEL: "~", OverrideType.ADD: "+", OverrideType.FORCE_ADD: "++"}.get(parsed.type, "")
    key = parsed.key_or_group
    head = prefix + key
    rest = text.strip()[len(head):] if text.strip().startswith(head) else None
    if rest is None or (rest and not rest.startswith("=")):
        raise OverrideSyntaxError(f"{shown!r}: write the key without spaces", "write KEY=VALUE, e.g. trainer.save_freq=20")
    return UserOverride(prefix, key, rest[1:] if rest else None)
