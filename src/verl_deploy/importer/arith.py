"""bash's integer arithmetic, `$(( ))` and `(( ))`, evaluated without running anything: 64-bit integers,
+ - * / % ** << >> comparisons && || ?: ( ) and variable names (read through the caller's `value_of`)."""

from __future__ import annotations

import re
from typing import Any


class ArithUnknown(Exception):
    """The expression cannot be evaluated (a name not known, division by 0, syntax this reader lacks)."""

    def __init__(self, message: str, unknown: Any = None):  # the reader's Unknown that stopped it
        super().__init__(message)
        self.unknown = unknown


_TOKEN = re.compile(r"\s*(0[xX][0-9a-fA-F]+|\d+|[A-Za-z_][A-Za-z0-9_]*|\*\*|<<|>>|<=|>=|==|!=|&&|\|\||[-+*/%()<>!~^&|?:])")


def arith(expression: str, value_of) -> int:
    """Evaluate bash's $(( )) over 64-bit integers: + - * / % ** << >> comparisons && || ?: ( ) and names."""
    tokens: list[str] = []
    position = 0
    expression = expression.strip()
    while position < len(expression):
        match = _TOKEN.match(expression, position)
        if not match:
            if expression[position:].strip() == "":
                break
            raise ArithUnknown(f"cannot read {expression[position:position + 10]!r}")
        tokens.append(match.group(1))
        position = match.end()
    parser = _Arith(tokens, value_of)
    result = parser.ternary()
    if parser.i != len(tokens):
        raise ArithUnknown(f"unexpected {tokens[parser.i]!r}")
    return result


def _trunc_div(a: int, b: int) -> int:
    if b == 0:
        raise ArithUnknown("division by 0")
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


class _Arith:
    LEVELS = [["||"], ["&&"], ["|"], ["^"], ["&"], ["==", "!="], ["<", ">", "<=", ">="], ["<<", ">>"], ["+", "-"],
              ["*", "/", "%"]]

    def __init__(self, tokens: list[str], value_of):
        self.t, self.i, self.value_of = tokens, 0, value_of

    def peek(self) -> str | None:
        return self.t[self.i] if self.i < len(self.t) else None

    def take(self) -> str:
        token = self.peek()
        if token is None:
            raise ArithUnknown("expression ends early")
        self.i += 1
        return token

    def ternary(self) -> int:
        cond = self.binary(0)
        if self.peek() == "?":
            self.take()
            yes = self.ternary()
            if self.take() != ":":
                raise ArithUnknown("'?' without ':'")
            no = self.ternary()
            return yes if cond else no
        return cond

    def binary(self, level: int) -> int:
        if level == len(self.LEVELS):
            return self.power()
        left = self.binary(level + 1)
        while self.peek() in self.LEVELS[level]:
            op = self.take()
            right = self.binary(level + 1)
            left = _apply(op, left, right)
        return left

    def power(self) -> int:
        base = self.unary()
        if self.peek() == "**":
            self.take()
            exponent = self.power()
            if exponent < 0:
                raise ArithUnknown("negative exponent")
            return base ** exponent
        return base

    def unary(self) -> int:
        token = self.peek()
        if token in ("-", "+", "!", "~"):
            self.take()
            value = self.unary()
            return {"-": -value, "+": value, "!": int(not value), "~": ~value}[token]  # type: ignore[index]
        return self.atom()

    def atom(self) -> int:
        token = self.take()
        if token == "(":
            value = self.ternary()
            if self.take() != ")":
                raise ArithUnknown("unbalanced parenthesis")
            return value
        if re.fullmatch(r"0[xX][0-9a-fA-F]+", token):
            return int(token, 16)
        if token.isdigit():
            return int(token, 8) if len(token) > 1 and token.startswith("0") else int(token)
        if re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", token):
            return self.value_of(token)
        raise ArithUnknown(f"unexpected {token!r}")


def _apply(op: str, a: int, b: int) -> int:
    if op == "/":
        return _trunc_div(a, b)
    if op == "%":
        if b == 0:
            raise ArithUnknown("division by 0")
        return a - _trunc_div(a, b) * b
    return {
        "+": a + b, "-": a - b, "*": a * b, "<<": a << b, ">>": a >> b, "<": int(a < b), ">": int(a > b),
        "<=": int(a <= b), ">=": int(a >= b), "==": int(a == b), "!=": int(a != b), "&&": int(bool(a and b)),
        "||": int(bool(a or b)), "&": a & b, "|": a | b, "^": a ^ b,
    }[op]
