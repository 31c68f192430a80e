"""The inventory of verl's configuration checks per release: which the rules cover, which only verify does.

A new verl release is supported by reading its code, not by waiting for a user's failed run: this
walks the files on the launch path (entry -> config dataclasses -> validate_config -> trainer ->
workers -> engine), lists every ``assert`` and every ``raise`` under an ``if`` whose condition reads
configuration, and says for each whether a rule cites it (``RULES`` in rules/__init__.py), whether
only ``--verify`` reaches it (the config dataclasses and validate_config run there), or neither.
"Reads configuration" is a textual test on the condition (it names config, cfg or a setting such as
a batch size, a length, a mode): the list is a maintainer's worklist, reviewed by a person, not a proof.

``tools/rule_inventory.py`` writes one table per release into ``docs/inventory/``; the tests check
that every rule's citation still points at a check in that release's source, and that the committed
tables are what this code makes of the release today.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, Iterator

from verl_deploy.rules.inventory_notes import note_for

# the launch path, as globs under the tree that holds verl/ (a wheel install, a checkout)
LAUNCH_PATH = (
    "verl/trainer/main_ppo.py", "verl/trainer/ppo/*.py", "verl/trainer/ppo/v1/*.py", "verl/trainer/config/*.py",
    "verl/utils/config.py", "verl/workers/config/*.py", "verl/workers/*.py", "verl/workers/actor/*.py",
    "verl/workers/engine/*.py", "verl/workers/engine/*/*.py", "verl/workers/rollout/*.py",
    "verl/workers/rollout/vllm_rollout/*.py", "verl/workers/rollout/sglang_rollout/*.py",
    "verl/experimental/agent_loop/*.py", "verl/experimental/one_step_off_policy/*.py",
    "verl/experimental/fully_async_policy/*.py", "verl/protocol.py", "verl/utils/seqlen_balancing.py",
    "verl/utils/tensordict_utils.py", "verl/utils/dataset/rl_dataset.py",
)
# helpers whose every check sees values from the config (batch sizes, chunk counts, token budgets)
EVERY_CHECK_COUNTS = ("verl/protocol.py", "verl/utils/tensordict_utils.py", "verl/utils/seqlen_balancing.py")
_CONFIG_WORDS = re.compile(r"config|cfg|batch_size|_size\b|_len\b|length|\bmode\b|_mode\b|strategy|_freq|n_gpus|nnodes"
                           r"|parallel|micro|mini|num_workers|\.n\b|_n\b|world_size|rollout|offload")
_FILE_LINE = re.compile(r"((?:verl|recipe)/[\w/]+\.py):(\d+)(?:-(\d+))?((?:\s*\([^)]*\))?(?:,\s*\d+(?:-\d+)?\s*"
                        r"\([^)]*\))*)")
_MORE_LINES = re.compile(r"(\d+)(?:-(\d+))?\s*\(([^)]*)\)")
_RELEASE = re.compile(r"\d+\.\d+\.\d+")
RELEASES = ("0.6.0", "0.6.1", "0.7.0", "0.7.1", "0.8.0", "0.9.0", "0.9.1")


@dataclass(frozen=True)
class Check:
    """One configuration-dependent assert/raise in a release's source."""
    path: str  # relative to the tree, e.g. verl/workers/config/actor.py
    line: int
    kind: str  # "assert" or "raise"
    condition: str  # the asserted (or raising) condition, unparsed, one line
    message: str  # the message, when it is a literal or f-string, shortened
    scope: str = ""  # the enclosing class and function, e.g. CriticWorker._build_critic_model_optimizer


@dataclass(frozen=True)
class Citation:
    """A rule's claim: in RELEASE, the check lives at PATH:FIRST-LAST."""
    rule: str
    release: str
    path: str
    first: int
    last: int


def _short(text: str, limit: int = 140) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _message(node: ast.AST | None) -> str:
    if node is None:
        return ""
    if isinstance(node, ast.Call) and node.args:  # raise ValueError("...")
        node = node.args[0]
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return _short(node.value)
    if isinstance(node, (ast.JoinedStr, ast.BinOp)):
        return _short(ast.unparse(node))
    return ""


def _walk_with_ifs(node: ast.AST, conditions: tuple[str, ...] = ()) -> Iterator[tuple[ast.AST, tuple[str, ...]]]:
    for child in ast.iter_child_nodes(node):
        if isinstance(child, ast.If):
            test = ast.unparse(child.test)
            for body_child in child.body:
                yield body_child, conditions + (test,)
                yield from _walk_with_ifs(body_child, conditions + (test,))
            for other in child.orelse:
                yield other, conditions + (f"not ({test})",)
                yield from _walk_with_ifs(other, conditions + (f"not ({test})",))
        else:
            yield child, conditions
            yield from _walk_with_ifs(child, conditions)


def _scopes(module: ast.Module) -> list[tuple[int, int, str, bool]]:
    """(first line, last line, name, is a class) of every class and function, outermost first."""
    return [(node.lineno, node.end_lineno or node.lineno, node.name, isinstance(node, ast.ClassDef))
            for node in ast.walk(module) if isinstance(node, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))]


def _scope_of(line: int, scopes: list[tuple[int, int, str, bool]]) -> str:
    """'Class.function' around LINE: the innermost class, then the innermost function below it."""
    around = sorted((s for s in scopes if s[0] <= line <= s[1]), key=lambda s: s[0])
    classes = [name for _, _, name, is_class in around if is_class]
    functions = [name for _, _, name, is_class in around if not is_class]
    return ".".join(([classes[-1]] if classes else []) + ([functions[-1]] if functions else []))


def checks_in_file(tree: Path, relative: str) -> list[Check]:
    """The configuration-dependent asserts and raises of one file."""
    source = (tree / relative).read_text(encoding="utf-8", errors="replace")
    try:
        with warnings.catch_warnings():  # old escape sequences in verl's source are not ours to report
            warnings.simplefilter("ignore")
            module = ast.parse(source, relative)
    except SyntaxError:
        return []
    counts = relative in EVERY_CHECK_COUNTS
    scopes = _scopes(module)
    found: dict[int, Check] = {}
    for node, conditions in _walk_with_ifs(module):
        if isinstance(node, ast.Assert):
            condition = ast.unparse(node.test)
            if counts or _CONFIG_WORDS.search(condition):
                found[node.lineno] = Check(relative, node.lineno, "assert", _short(condition), _message(node.msg),
                                           _scope_of(node.lineno, scopes))
        elif isinstance(node, ast.Raise) and conditions:
            condition = conditions[-1]
            if counts or _CONFIG_WORDS.search(condition):
                found[node.lineno] = Check(relative, node.lineno, "raise", _short(condition), _message(node.exc),
                                           _scope_of(node.lineno, scopes))
    return [found[line] for line in sorted(found)]


def launch_path_files(tree: Path) -> list[str]:
    files: set[str] = set()
    for pattern in LAUNCH_PATH:
        files.update(str(p.relative_to(tree)) for p in tree.glob(pattern) if p.is_file())
    return sorted(files)


def checks_in_tree(tree: Path) -> list[Check]:
    return [check for relative in launch_path_files(tree) for check in checks_in_file(tree, relative)]


_RELEASE_EXPR = re.compile(r"(\d+\.\d+)\.(\d+|x)(?:\s*-\s*(\d+\.\d+\.\d+))?")


def _releases_in(text: str) -> list[str]:
    """'0.6.x', '0.7.1-0.9.0', '0.8.0, 0.9.0' -> the releases they name, in order."""
    found: list[str] = []
    for minor, patch, until in _RELEASE_EXPR.findall(text):
        if patch == "x":
            found += [r for r in RELEASES if r.startswith(minor + ".")]
        elif until and f"{minor}.{patch}" in RELEASES and until in RELEASES:
            found += list(RELEASES[RELEASES.index(f"{minor}.{patch}"):RELEASES.index(until) + 1])
        elif f"{minor}.{patch}" in RELEASES:
            found.append(f"{minor}.{patch}")
    return list(dict.fromkeys(found))


def _releases_of(key: str) -> list[str]:
    """'0.8.0-0.9.1 (engine workers)' -> the releases in that span; 'megatron-core 0.13.1' -> []."""
    return _releases_in(key.split("(")[0]) if key[:1].isdigit() else []


def citations(rules: Iterable) -> list[Citation]:
    """Every (rule, release, file, lines) a rule's source table names, read from its text.

    `path:L (0.7.0), M (0.8.0-0.9.0)` pins each line to its releases; a line with no release in
    parentheses holds for every release of its key; a range `L-M` covers both ends.
    """
    out: list[Citation] = []
    for rule in rules:
        for key, text in rule.source.items():
            span = _releases_of(key)
            for match in _FILE_LINE.finditer(text):
                path, tail = match.group(1), match.group(4) or ""
                pieces = [(int(match.group(2)), int(match.group(3) or match.group(2)), "")]
                rest = tail
                if tail.strip().startswith("("):
                    close = tail.index(")")
                    pieces[0] = (pieces[0][0], pieces[0][1], tail[:close + 1])
                    rest = tail[close + 1:]
                pieces += [(int(m.group(1)), int(m.group(2) or m.group(1)), m.group(3))
                           for m in _MORE_LINES.finditer(rest)]
                for first, last, releases_text in pieces:
                    for release in _releases_in(releases_text) or span:
                        out.append(Citation(rule.name, release, path, first, last))
    return out


def coverage(check: Check, release: str, cited: list[Citation]) -> str:
    """'rule NAME', 'verify: why', 'not settable: why' or 'not covered' for one check of a release."""
    for citation in cited:
        if citation.release == release and citation.path == check.path and \
                citation.first - 3 <= check.line <= citation.last + 3:
            return f"rule {citation.rule}"
    note = note_for(check.path, check.condition, check.message, check.scope, release)
    if note is not None:
        return f"{note.state}: {note.reason}"
    return "not covered"


def table(release: str, tree: Path, rules: Iterable) -> str:
    """The committed Markdown table of one release."""
    cited = citations(rules)
    rows = [(check, coverage(check, release, cited)) for check in checks_in_tree(tree)]
    counts = {state: sum(1 for _, c in rows if c.startswith(state))
              for state in ("rule", "verify", "not settable", "not covered")}
    lines = [f"# verl {release}: configuration checks on the launch path",
             "",
             "Generated by `python tools/rule_inventory.py` from the release's own source; do not edit by hand.",
             f"{len(rows)} checks: {counts['rule']} covered by a rule, {counts['verify']} only by `--verify`, "
             f"{counts['not settable']} on values no verl-deploy setting reaches, {counts['not covered']} not covered.",
             "",
             "Each `verify` / `not settable` row says why (rules/inventory_notes.py); `not covered` is the worklist.",
             "",
             "| where | kind | condition | message | covered by |",
             "|---|---|---|---|---|"]
    for check, state in rows:
        cells = [f"{check.path}:{check.line}", check.kind, check.condition, check.message, state]
        lines.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
    return "\n".join(lines) + "\n"


_WORD = re.compile(r"[A-Za-z_][A-Za-z0-9_]{3,}")


def citation_problem(citation: Citation, tree: Path, rule_text: str) -> str | None:
    """Why a citation no longer points at a check in TREE (None when it does).

    The cited lines (with 3 lines of slack either way) must hold an assert, a raise, or a call the
    rule's text names (a citation may point at the call that reaches the check, e.g. make_iterator).
    """
    file = tree / citation.path
    if not file.is_file():
        return f"{citation.path} does not exist in verl {citation.release}"
    lines = file.read_text(encoding="utf-8", errors="replace").splitlines()
    if citation.last > len(lines):
        return f"{citation.path} has {len(lines)} lines, the citation names line {citation.last}"
    window = "\n".join(lines[max(0, citation.first - 4):citation.last + 3])
    if re.search(r"\bassert\b|\braise\b", window):
        return None
    named = {w for w in _WORD.findall(rule_text) if not w.startswith(("verl", "recipe"))}
    if any(re.search(rf"\b{re.escape(word)}\b", window) for word in named):
        return None
    return (f"{citation.path}:{citation.first} in verl {citation.release} holds no assert, raise or call the rule "
            f"names: {_short(window, 200)!r}")
