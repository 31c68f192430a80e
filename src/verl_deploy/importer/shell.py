"""Read a bash launch script statically, as bash would run it, without running anything.

The syntax tree comes from tree-sitter's bash grammar (the grammar editors and GitHub use: full bash
syntax, positions of every node, no code run). This module walks it in order: assignments (plain,
`export`/`declare`/`local`/`readonly`, arrays, `+=`), `source`, functions and their calls, and the
branches bash would take: an `if`/`elif`, a `case` or an `a && b || c` whose test the known values
decide is followed like bash follows it (an `exit` there ends the script). A branch the reader cannot
decide (a test on a command substitution, a file test, a loop) is not followed: what it would set
becomes unknown and is listed with the variable that decides it, never guessed. Word expansion is in
expansion.py.
"""

from __future__ import annotations

import fnmatch
import functools
import os
from pathlib import Path

from verl_deploy.importer import conditions
from verl_deploy.importer.expansion import GENERATED_MARK, Expander
from verl_deploy.importer.reading import Command, Reading, ScriptProblem, Unknown, Word

__all__ = ["Command", "GENERATED_MARK", "Reading", "ScriptProblem", "Unknown", "Word", "read_script", "read_text"]

MAX_SCRIPT_BYTES = 1 << 20
MAX_SOURCE_DEPTH = 4
MAX_CALL_DEPTH = 16


@functools.lru_cache(maxsize=1)
def _parser():
    import tree_sitter
    import tree_sitter_bash

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


def read_script(path: str | os.PathLike, environ: dict[str, str] | None = None) -> Reading:
    """Read `path`; `environ` gives values for variables the script reads but does not set."""
    source = _load(Path(path))
    reading = Reading(str(path))
    _read(_Walker(reading, dict(environ or {}), Path(path).parent, 0), source)
    return reading


def read_text(text: str, name: str = "<script>", environ: dict[str, str] | None = None) -> Reading:
    reading = Reading(name)
    _read(_Walker(reading, dict(environ or {}), Path("."), 0), text.encode("utf-8"))
    return reading


def _read(walker: _Walker, source: bytes) -> None:
    try:
        walker.run(source)
    except _Exited as stop:
        if stop.before_end:
            walker.r.note(f"the script exits at line {stop.line} (`{stop.text}`): what follows is not read", stop.line)


def _load(path: Path) -> bytes:
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_SCRIPT_BYTES + 1)
    except FileNotFoundError:
        raise ScriptProblem(f"{path}: no such file") from None
    except OSError as exc:
        raise ScriptProblem(f"cannot read {path}: {exc.strerror or exc}") from None
    if len(data) > MAX_SCRIPT_BYTES:
        raise ScriptProblem(f"{path} is larger than {MAX_SCRIPT_BYTES} bytes: not a launch script")
    if b"\x00" in data:
        raise ScriptProblem(f"{path} is binary, not a bash script")
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        raise ScriptProblem(f"{path} is not UTF-8 text") from None
    return data


class _Exited(Exception):
    """`exit` on a path bash takes: the script ends here."""

    def __init__(self, line: int, text: str, before_end: bool):
        super().__init__(text)
        self.line, self.text, self.before_end = line, text, before_end


class _Returned(Exception):
    """`return` in a function body."""


_SKIP = {"comment", "#!", "heredoc_body", "\n", ";", "&"}
_LOOPS = {"for_statement": "a for loop", "c_style_for_statement": "a for loop", "while_statement": "a while loop"}
_HANDLERS = {
    "variable_assignment": "_assignment", "variable_assignments": "_assignments", "declaration_command": "_declaration",
    "unset_command": "_unset", "command": "_command", "list": "_list", "pipeline": "_pipeline",
    "compound_statement": "_compound", "redirected_statement": "_redirected", "if_statement": "_if",
    "case_statement": "_case", "negated_command": "_negated", "test_command": "_test",
    "function_definition": "_function", "subshell": "_subshell", "do_group": "_compound",
    **{kind: "_loop" for kind in _LOOPS},
}


class _Walker(Expander):
    def __init__(self, reading: Reading, environ: dict[str, str], base: Path, depth: int):
        self.r, self.environ, self.base, self.depth = reading, environ, base, depth
        self.src = b""
        self.positional: list[str] | None = None
        # while a branch the reader cannot decide is walked: what decides it (what it sets becomes unknown)
        self.undecided: tuple[str, int] | None = None
        self.set_undecided: list[str] = []
        self.calls = 0

    def run(self, source: bytes) -> None:
        self.src = source
        tree = _parser().parse(source)
        self.block(tree.root_node.children)

    def block(self, nodes) -> bool | None:
        """Walk statements in order; the exit status of the last (True/False, None: not known)."""
        status: bool | None = True
        statements = [n for n in nodes if n.is_named and n.type not in _SKIP]
        for index, node in enumerate(statements):
            try:
                status = self.statement(node)
            except _Exited as stop:
                raise _Exited(stop.line, stop.text, stop.before_end or index + 1 < len(statements)) from None
        return status

    # --- statements -------------------------------------------------------------------
    def statement(self, node) -> bool | None:
        kind = node.type
        if kind in _SKIP or not node.is_named:
            return True
        if kind == "ERROR" or node.has_error and kind not in ("command", "redirected_statement"):
            self.r.note("bash syntax this reader cannot parse", _line(node))
            return None
        handler = _HANDLERS.get(kind)
        if handler is None:
            self.r.note(f"a {kind.replace('_', ' ')} (not followed)", _line(node))
            return None
        return getattr(self, handler)(node)

    def _assignment(self, node) -> bool:
        self.assign(node, export=False)
        return True

    def _assignments(self, node) -> bool:
        for child in node.named_children:
            self.assign(child, export=False)
        return True

    def _declaration(self, node) -> bool:
        export = bool(node.children) and self.text(node.children[0]) == "export"
        for child in node.named_children:
            if child.type == "variable_assignment":
                self.assign(child, export=export)
            elif child.type == "variable_name" and export:
                self.r.exported.add(self.text(child))
        return True

    def _unset(self, node) -> bool:
        for child in node.named_children:
            name = self.text(child)
            if self.undecided is not None:
                self._store(name, "", _line(node))
            else:
                self.r.variables.pop(name, None)
        return True

    def _list(self, node) -> bool | None:
        """`a && b`, `a || b`, `a; b`: b runs as bash decides from a's status."""
        status: bool | None = True
        operator = ";"
        for child in node.children:
            if not child.is_named:
                operator = child.type if child.type in ("&&", "||") else ";"
                continue
            if child.type in _SKIP:
                continue
            if operator == ";" or (operator == "&&" and status is True) or (operator == "||" and status is False):
                status = self.statement(child)
            elif status is None:
                test = node.children[0]
                self._undecidable([[child]], f"`{_short(self.text(test))}` (line {_line(test)})", [test], _line(child))
                status = None
        return status

    def _pipeline(self, node) -> None:
        for child in node.named_children:
            self.statement(child)
        return None

    def _compound(self, node) -> bool | None:
        if node.children and node.children[0].type == "((":  # (( expr )): true when not 0
            expression = self.text(node)[2:-2]
            text, unknown = self.arithmetic_text(expression, _line(node))
            return None if unknown else text != "0"
        return self.block(node.children)

    def _redirected(self, node) -> bool | None:
        body = node.child_by_field_name("body")
        return self.statement(body) if body is not None else None

    def _negated(self, node) -> bool | None:
        inner = node.named_children[-1] if node.named_children else None
        status = self.statement(inner) if inner is not None else None
        return None if status is None else not status

    # --- branches ---------------------------------------------------------------------
    def _if(self, node) -> bool | None:
        clauses = _if_clauses(node)
        for index, (tests, body) in enumerate(clauses):
            if tests is None:  # else
                return self.block(body)
            status = self.block(tests) if self.undecided is None else None
            if status is True:
                return self.block(body)
            if status is None:
                rest = [b for _, b in clauses[index:]]
                return self._undecidable(rest, f"the if at line {_line(node)}", tests, _line(node))
        return True

    def _case(self, node) -> bool | None:
        value = node.child_by_field_name("value")
        text, unknown = self.expand(value, quoted=True) if value is not None else ("", [])
        items = [_case_item(child) for child in node.named_children if child.type == "case_item"]
        for index, (patterns, body) in enumerate(items):
            matched = None if unknown or self.undecided is not None else self._matches(text, patterns)
            if matched is None:
                return self._undecidable([b for _, b in items[index:]], f"the case at line {_line(node)}",
                                         [value] if value is not None else [], _line(node))
            if matched:
                return self.block(body)
        return True

    def _matches(self, text: str, patterns) -> bool | None:
        for pattern in patterns:
            word, unknown = self.expand(pattern, quoted=False)
            if unknown:
                return None
            literal = pattern.type in ("string", "raw_string")
            if (word == text) if literal else fnmatch.fnmatchcase(text, word):
                return True
        return False

    def _test(self, node) -> bool | None:
        """[ ... ] and [[ ... ]]."""
        expression = node.named_children[0] if node.named_children else None
        if expression is None:
            return False
        return self._expression(expression, self.text(node).startswith("[["))

    def _expression(self, node, double: bool) -> bool | None:
        if node.type == "parenthesized_expression" and node.named_children:
            return self._expression(node.named_children[0], double)
        if node.type == "unary_expression":
            return self._unary(node, double)
        if node.type == "binary_expression":
            return self._binary(node, double)
        text, unknown = self.expand(node, quoted=True)  # [ "$X" ]: true when not empty
        return None if unknown else text != ""

    def _unary(self, node, double: bool) -> bool | None:
        operator = self.text(node.child(0))
        operand = node.named_children[-1]
        if operator == "!":
            inner = self._expression(operand, double)
            return None if inner is None else not inner
        text, unknown = self.expand(operand, quoted=True)
        return None if unknown else conditions.unary(operator, text)

    def _binary(self, node, double: bool) -> bool | None:
        left, right = node.child_by_field_name("left"), node.child_by_field_name("right")
        operator = self.text(node.child_by_field_name("operator"))
        if operator in ("&&", "||", "-a", "-o"):
            return _logical(operator in ("&&", "-a"), self._expression(left, double), self._expression(right, double))
        if any(side.type in ("binary_expression", "unary_expression") for side in (left, right)):
            return None  # the grammar groups `[[ -n $a && $b = c ]]` otherwise than bash: not decided
        left_text, unknown_left = self.expand(left, quoted=True)
        right_text, unknown_right = self.expand(right, quoted=True)
        if unknown_left or unknown_right:
            return None
        pattern = double and right.type not in ("string", "raw_string")
        return conditions.binary(operator, left_text, right_text, pattern=pattern)

    def _undecidable(self, bodies, what: str, tests, line: int, reason: str = "") -> bool | None:
        """Branches whose test is not known: walked only to mark what they set (and launch) as unknown. Inside
        another such branch, the outer one is what decides (its note names them all)."""
        outer, outer_names = self.undecided, self.set_undecided
        if outer is None:
            names_deciding = [f"${n}" for n in dict.fromkeys(self._unknown_names(tests))]
            reason = reason or self._why_unknown(tests)
            self.undecided = (f"{what}, which depends on {', '.join(names_deciding) or reason}", line)
        self.set_undecided = []
        try:
            for body in bodies:
                self.block(body)
        finally:
            names, self.undecided, self.set_undecided = self.set_undecided, outer, outer_names
        if names and outer is None:
            self.r.note(f"{what} is not followed: it depends on {reason}; what it sets is not known "
                        f"({', '.join(dict.fromkeys(names))})", line)
        self.set_undecided += names
        return None

    def _unknown_names(self, tests) -> list[str]:
        """The variables in these tests whose value the reader does not know."""
        found = []
        for test in tests:
            for name in self._names_in(test):
                value = self.r.variables.get(name, self.environ.get(name))
                if isinstance(value, Unknown) or (value is None and name.isidentifier()):
                    found.append(name)
        return found

    def _why_unknown(self, tests) -> str:
        """The variables that decide a test and are not known, with how to give them."""
        reasons: list[str] = []
        for name in self._unknown_names(tests):
            value = self.r.variables.get(name, self.environ.get(name))
            detail = f"{value.why}, line {value.line}" if isinstance(value, Unknown) else "not set in the script"
            reasons.append(f"${name} ({detail})" + self._env_fix(name))
        if not reasons:
            text = " ".join(self.text(t) for t in tests)
            return f"`{_short(text)}`, which this reader cannot evaluate (a command, a file test or the script's arguments)"
        return "; ".join(dict.fromkeys(reasons))

    def _env_fix(self, name: str) -> str:
        """--env gives a variable the script reads from the environment (not one it sets itself)."""
        return f": give it with --env {name}=VALUE" if name in self.r.environment else ""

    def _names_in(self, node) -> list[str]:
        found: list[str] = []
        stack = [node]
        while stack:
            current = stack.pop()
            if current.type in ("simple_expansion", "expansion"):
                name = next((c for c in current.named_children if c.type in ("variable_name", "subscript")), None)
                if name is not None:
                    found.append(self.text(name).split("[")[0])
            elif current.type == "variable_name" and current.parent is not None and \
                    current.parent.type in ("binary_expression", "unary_expression"):  # (( NAME > 1 ))
                found.append(self.text(current))
            stack.extend(reversed(current.children))
        return found

    def _loop(self, node) -> bool | None:
        what = f"{_LOOPS[node.type]} at line {_line(node)}"
        body = node.child_by_field_name("body")
        return self._undecidable([[body]] if body is not None else [], what, [], _line(node),
                                 "how often it runs (loops are not followed)")

    def _subshell(self, node) -> bool | None:
        """( ... ): its assignments stay inside; what it runs is read."""
        saved = dict(self.r.variables), set(self.r.exported)
        try:
            return self.block(node.children)
        finally:
            self.r.variables, self.r.exported = saved[0], saved[1]

    def _function(self, node) -> bool:
        name = node.child_by_field_name("name")
        body = node.child_by_field_name("body")
        if name is not None and body is not None:
            self.r.functions[self.text(name)] = (self, body)
        return True

    def _call(self, words: list[Word], line: int) -> bool | None:
        walker, body = self.r.functions[words[0].text]
        if self.calls >= MAX_CALL_DEPTH:
            self.r.note(f"{words[0].text} calls itself more than {MAX_CALL_DEPTH} deep (not followed)", line)
            return None
        saved = walker.positional, walker.calls
        walker.positional, walker.calls = [w.text for w in words[1:]], self.calls + 1
        try:
            return walker.statement(body)
        except _Returned:
            return True
        finally:
            walker.positional, walker.calls = saved

    # --- assignments --------------------------------------------------------------------
    def assign(self, node, *, export: bool) -> None:
        name_node = node.child_by_field_name("name")
        value_node = node.child_by_field_name("value")
        if name_node is None:
            return
        name = self.text(name_node)
        line = _line(node)
        if name_node.type == "subscript":  # arr[i]=v: the array is no longer known element by element
            base = self.text(name_node.named_children[0]) if name_node.named_children else name
            self._store(base, self.r.note(f"{base} is changed element by element", line), line)
            return
        appending = any(self.text(c) == "+=" for c in node.children if not c.is_named)
        if self.undecided is not None:
            self._store(name, None, line, appending=appending)
        else:
            value = self._value(value_node)
            self._store(name, self._appended(name, value, line) if appending else value, line)
        if export:
            self.r.exported.add(name)

    def _value(self, value_node):
        if value_node is None:
            return ""
        if value_node.type == "array":
            items: list = []
            for element in value_node.named_children:
                if element.type == "comment":
                    continue
                items += self.words(element)  # each with its own line (and what in it is unknown)
            return items
        text, unknown = self.expand(value_node, quoted=True)
        return unknown[0] if unknown else text

    def _appended(self, name: str, value, line: int):
        old = self.r.variables.get(name)
        if isinstance(value, list):
            return (old if isinstance(old, list) else [old] if old else []) + value
        old = "" if old is None else old
        if isinstance(old, str) and isinstance(value, str):
            return old + value
        return self.r.note(f"{name} is appended to with an unknown value", line)

    def _store(self, name: str, value, line: int, *, appending: bool = False) -> None:
        """Set a variable; inside a branch the reader cannot decide, it becomes unknown (an array appended to
        keeps what it held, with one unknown element for what the branch may add)."""
        if self.undecided is not None:
            unknown = Unknown(f"${name} is set in {self.undecided[0]}", line)
            old = self.r.variables.get(name)
            value = old + [unknown] if appending and isinstance(old, list) else unknown
            self.set_undecided.append(name)
        self.r.variables[name] = value
        self.r.assigned_at[name] = line

    # --- commands -----------------------------------------------------------------------
    def _command(self, node) -> bool | None:
        line = _line(node)
        if self.undecided is not None:  # not run: its words are not expanded (nothing of it is listed)
            text = " ".join(self.text(node).split())
            if " -m " in text or text.startswith(("source ", ". ")):
                self.set_undecided.append(f"the command at line {line}")
            return None
        words: list[Word] = []
        parts = [c for c in node.named_children if c.type not in ("variable_assignment", "file_redirect",
                                                                     "herestring_redirect", "comment")]
        for part in parts:
            words += self.words(part if part.type != "command_name" else part.named_children[0])
        if not words:
            return True
        return self._run(words, line, node)

    def _run(self, words: list[Word], line: int, node) -> bool | None:
        """A command on the path bash takes: a builtin that changes what the reader follows, a function call,
        or a command recorded (with its exit status unknown)."""
        head = words[0].text
        builtin = _BUILTINS.get(head)
        if builtin is not None:
            handled, status = getattr(self, builtin)(words, line, node)
            if handled:
                return status
        if head in self.r.functions:
            return self._call(words, line)
        env = {k: v for k, v in self.r.variables.items() if k in self.r.exported and isinstance(v, str)}
        self.r.commands.append(Command(words, line, env))
        return None

    def _source_builtin(self, words: list[Word], line: int, node) -> tuple[bool, bool | None]:
        if len(words) < 2 or node.child_by_field_name("name") is None:
            return False, None
        self.source(words[1], line)
        return True, True

    def _exit_builtin(self, words: list[Word], line: int, node) -> tuple[bool, bool | None]:
        raise _Exited(line, _short(self.text(node)), False)

    def _return_builtin(self, words: list[Word], line: int, node) -> tuple[bool, bool | None]:
        if self.positional is None:
            return False, None
        raise _Returned()

    def _status_builtin(self, words: list[Word], line: int, node) -> tuple[bool, bool | None]:
        return True, words[0].text != "false"

    def _test_builtin(self, words: list[Word], line: int, node) -> tuple[bool, bool | None]:
        if any(w.unknown for w in words):
            return True, None
        args = [w.text for w in words[1:]]
        return True, conditions.from_words(args[:-1] if words[0].text == "[" else args)

    def _shift_builtin(self, words: list[Word], line: int, node) -> tuple[bool, bool | None]:
        if self.positional is None:
            return False, None
        count = int(words[1].text) if len(words) > 1 and words[1].text.isdigit() else 1
        self.positional = self.positional[count:]
        return True, True

    def source(self, word: Word, line: int) -> None:
        if word.unknown:
            self.r.note(f"sources a file whose name is not known ({word.text})", line)
            return
        path = Path(word.text)
        if not path.is_absolute():
            path = self.base / path
        if self.depth >= MAX_SOURCE_DEPTH:
            self.r.note(f"sources {word.text} more than {MAX_SOURCE_DEPTH} files deep (not read)", line)
            return
        try:
            data = _load(path)
        except ScriptProblem:
            self.r.note(f"sources {word.text}, which is not there (what it sets is not known)", line)
            return
        inner = _Walker(self.r, self.environ, path.parent, self.depth + 1)
        inner.run(data)


_BUILTINS = {"source": "_source_builtin", ".": "_source_builtin", "exit": "_exit_builtin", "return": "_return_builtin",
             "true": "_status_builtin", ":": "_status_builtin", "false": "_status_builtin", "test": "_test_builtin",
             "[": "_test_builtin", "shift": "_shift_builtin"}


def _logical(both: bool, left: bool | None, right: bool | None) -> bool | None:
    """`a && b` (both) or `a || b` when either side may be unknown: decided when one side settles it."""
    settles = False if both else True
    if left is settles or right is settles:
        return settles
    return None if left is None or right is None else not settles


def _if_clauses(node) -> list[tuple[list | None, list]]:
    """(test statements, body statements) of `if`, each `elif`, and `else` (tests None)."""
    tests: list = []
    body: list = []
    later: list[tuple[list | None, list]] = []
    part = tests
    for child in node.children:
        if child.type == "then":
            part = body
        elif child.type == "elif_clause":
            later += _if_clauses(child)
        elif child.type == "else_clause":
            later.append((None, [c for c in child.named_children if c.type not in _SKIP]))
        elif child.is_named and child.type not in _SKIP:
            part.append(child)
    return [(tests, body), *later]


def _case_item(node) -> tuple[list, list]:
    """(patterns, body statements) of one `pattern | pattern) body ;;`."""
    patterns = [node.child(i) for i in range(node.child_count) if node.field_name_for_child(i) == "value"]
    body = [c for c in node.named_children if c not in patterns and c.type not in _SKIP]
    return patterns, body


def _line(node) -> int:
    return node.start_point[0] + 1


def _short(text: str) -> str:
    text = " ".join(text.split())
    return text if len(text) <= 60 else text[:57] + "..."
