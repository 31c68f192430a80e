"""Every command line the agent skill (skills/verl-deploy/SKILL.md) shows is one the CLI accepts:
the subcommand exists and so does each flag it passes (an agent copies them as they are)."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

from typing import Any

import typer.main

from verl_deploy.cli import app

SKILL = Path(__file__).resolve().parents[1] / "skills" / "verl-deploy" / "SKILL.md"
ENDS = {"|", "||", "&&", ";", ">", "2>", "<"}


def command_lines(text: str) -> list[str]:
    """`verl-deploy ...` as written in the skill's code blocks and inline code spans."""
    spans = re.findall(r"```(?:bash)?\n(.*?)```", text, re.S) + re.findall(r"`([^`\n]*verl-deploy [^`\n]*)`", text)
    lines: list[str] = []
    for span in spans:
        for line in span.splitlines():
            line = line.split(" # ")[0].split("\t#")[0]
            for match in re.finditer(r"verl-deploy (.*)", line):
                lines.append(match.group(1).strip())
    return lines


def resolve(words: list[str]) -> tuple[Any, list[str], str]:
    command: Any = typer.main.get_command(app)
    path = []
    while hasattr(command, "commands") and words and not words[0].startswith("-"):
        sub = command.get_command(None, words[0])  # the root group loads a command's module when asked
        if sub is None:
            break
        path.append(words.pop(0))
        command = sub
    return command, words, " ".join(path)


def flags_of(command: Any) -> set[str]:
    names: set[str] = set()
    for param in command.params:
        for option in (*param.opts, *param.secondary_opts):
            names.add(option)
    return names


def test_the_skill_shows_commands_at_all():
    assert len(command_lines(SKILL.read_text())) >= 15


def test_every_command_line_in_the_skill_is_accepted_by_the_cli():
    problems = []
    for line in command_lines(SKILL.read_text()):
        try:
            words = shlex.split(line.replace("[flags]", "").replace("...", ""))
        except ValueError:
            words = line.split()
        words = words[:next((i for i, w in enumerate(words) if w in ENDS), len(words))]
        if words and words[0] in ("--install-completion", "--version"):
            continue
        if line.startswith("..."):  # "verl-deploy ... --flag": any command that builds a run
            root: Any = typer.main.get_command(app)
            every = set().union(*(flags_of(root.get_command(None, name)) for name in root.list_commands(None)))
            problems += [f"`verl-deploy {line}`: no command has {w}" for w in words
                         if w.startswith("--") and w.split("=")[0] not in every]
            continue
        command, rest, path = resolve(words)
        if not path:
            problems.append(f"`verl-deploy {line}`: no such command {words[:1]}")
            continue
        known = flags_of(command)
        for word in rest:
            if word.startswith("--") and word.split("=")[0] not in known:
                problems.append(f"`verl-deploy {line}`: {path} has no {word.split('=')[0]}")
    assert not problems, "\n".join(problems)


def test_the_checker_catches_a_flag_that_does_not_exist():
    command, rest, path = resolve(["plan", "--filter-groupz", "no"])
    assert path == "plan" and "--filter-groupz" not in flags_of(command) and "--filter-groups" in flags_of(command)
