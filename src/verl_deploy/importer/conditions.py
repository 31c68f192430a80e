"""The value of a bash test (`[ ]`, `[[ ]]`, `test`) on strings the reader knows, as bash decides it.

True or False when the operands decide it; None when they cannot (a file test: the file is on the
machine the script runs on, not here; an operand that is not a number where one is needed). The
reader follows an `if`/`case`/`&&` branch only on True or False, never on None.
"""

from __future__ import annotations

import fnmatch
import re

_NUMERIC = {"-eq": lambda a, b: a == b, "-ne": lambda a, b: a != b, "-lt": lambda a, b: a < b,
            "-le": lambda a, b: a <= b, "-gt": lambda a, b: a > b, "-ge": lambda a, b: a >= b}


def unary(operator: str, operand: str) -> bool | None:
    if operator == "-z":
        return operand == ""
    if operator == "-n":
        return operand != ""
    return None  # a file test, or one this reader does not know


def binary(operator: str, left: str, right: str, *, pattern: bool = False) -> bool | None:
    """`left OP right`; `pattern`: the right side is a glob ([[ x == pat ]] with an unquoted right side)."""
    if operator in ("=", "=="):
        return fnmatch.fnmatchcase(left, right) if pattern else left == right
    if operator == "!=":
        return not fnmatch.fnmatchcase(left, right) if pattern else left != right
    if operator in _NUMERIC:
        a, b = _integer(left), _integer(right)
        return None if a is None or b is None else _NUMERIC[operator](a, b)
    if operator == "<":
        return left < right
    if operator == ">":
        return left > right
    if operator == "=~":
        try:
            return re.search(right, left) is not None
        except re.error:
            return None
    return None


def from_words(words: list[str]) -> bool | None:
    """`test ARGS` / `[ ARGS ]` with one to three arguments (bash's POSIX rules by argument count)."""
    if words and words[0] == "!":
        inner = from_words(words[1:])
        return None if inner is None else not inner
    if len(words) == 0:
        return False
    if len(words) == 1:
        return words[0] != ""
    if len(words) == 2:
        return unary(words[0], words[1])
    if len(words) == 3:
        return binary(words[1], words[0], words[2])
    return None


def _integer(text: str) -> int | None:
    text = text.strip()
    return int(text) if re.fullmatch(r"[+-]?\d+", text) else None
