"""Find the verl launch in a read script: `python3 -m ENTRY [--config-path P] [--config-name N] overrides...`,
directly or after `ray job submit ... --`, and parse each override with Hydra's own grammar."""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from verl_deploy.hydra_text import OverrideSyntaxError, parse_override
from verl_deploy.importer.shell import Command, Reading, Unknown

_PYTHON = re.compile(r"(?:.*/)?python(?:\d+(?:\.\d+)?)?")


@dataclass(frozen=True)
class Setting:
    """One Hydra override from the script: `prefix key=value` as written, and its line."""

    prefix: str  # "", "+", "++" or "~"
    key: str
    value: str | None  # Hydra value text (None: `~key`)
    line: int
    text: str

    @property
    def provenance(self) -> str:
        return f"script line {self.line}"


@dataclass
class Launch:
    entry: str
    config_path: str | None
    config_name: str | None
    settings: list[Setting]
    line: int
    via_ray_job: bool
    unreadable: list[Unknown] = field(default_factory=list)

    def setting(self, key: str) -> Setting | None:
        """The last setting of `key` (Hydra keeps the last one)."""
        found = [s for s in self.settings if s.key == key]
        return found[-1] if found else None

    def where(self, key: str) -> str | None:
        """The script line that sets `key` (or a node above it)."""
        for setting in reversed(self.settings):
            if setting.key == key or key.startswith(setting.key + "."):
                return setting.provenance
        return None


class NoLaunch(Exception):
    """The script runs no `python3 -m ENTRY` command."""


def find_launch(reading: Reading) -> Launch:
    """The script's (last) verl launch; NoLaunch when it has none."""
    launches = [launch for launch in (_launch_of(c, reading) for c in reading.commands) if launch is not None]
    if not launches:
        why = next((f" ({u.why})" for u in reading.unreadable if "exits at line" in u.why or "the command at" in u.why), "")
        raise NoLaunch(f"{reading.path}: no `python3 -m ENTRY ...` command (nor `ray job submit ... -- python3 -m`) "
                       f"runs on the path the reader follows{why}")
    return launches[-1]


# python's own options before `-m` (python3 -u -m ..., python3 -X faulthandler -m ...); -X and -W take a value
_PYTHON_FLAGS = re.compile(r"-[bBdEhiIOqRsSuvx]+")
_PYTHON_FLAGS_WITH_VALUE = ("-X", "-W")


def _module_flag(texts: list[str], via_ray: bool) -> int | None:
    """The index of `-m` in `python3 [options] -m ENTRY` (after `--` in `ray job submit ... --`)."""
    for i, text in enumerate(texts):
        if not _PYTHON.fullmatch(text) or (via_ray and "--" not in texts[:i]):
            continue
        j = i + 1
        while j < len(texts) and texts[j] != "-m":
            if texts[j] in _PYTHON_FLAGS_WITH_VALUE:
                j += 2
            elif _PYTHON_FLAGS.fullmatch(texts[j]) or texts[j].startswith(("-X", "-W")):
                j += 1
            else:
                break
        if j + 1 < len(texts) and texts[j] == "-m":
            return j
    return None


def _launch_of(command: Command, reading: Reading) -> Launch | None:
    words = command.words
    texts = [w.text for w in words]
    via_ray = texts[:3] == ["ray", "job", "submit"]
    found = _module_flag(texts, via_ray)
    if found is None:
        return None
    entry = texts[found + 1]
    rest = words[found + 2:]
    config_path = config_name = None
    settings: list[Setting] = []
    unknown: list[Unknown] = []
    i = 0
    while i < len(rest):
        word = rest[i]
        text = word.text
        option = re.fullmatch(r"(--config-path|--config-name|-cp|-cn|--config-dir|-cd)(?:=(.*))?", text, re.S)
        if option:
            value = option.group(2)
            if value is None and i + 1 < len(rest):
                i += 1
                value = rest[i].text
            if option.group(1) in ("--config-path", "-cp"):
                config_path = value
            elif option.group(1) in ("--config-name", "-cn"):
                config_name = (value or "").removesuffix(".yaml")
            else:
                unknown.append(reading.note(f"{option.group(1)} adds a config directory (its configs are not read)",
                                            word.line))
            i += 1
            continue
        if word.unknown:
            listed = text == str(word.unknown[0]) and word.unknown[0] in reading.unreadable  # "$@": said once
            if not listed:
                unknown.append(reading.note(f"{_argument(text)} is not imported: {word.unknown[0].why}", word.line))
            i += 1
            continue
        if text.startswith("-"):
            unknown.append(reading.note(f"option {_short(text)} of {entry} is not a Hydra override; not imported",
                                        word.line))
            i += 1
            continue
        try:
            parsed = parse_override(text)
        except OverrideSyntaxError as exc:
            unknown.append(reading.note(f"{_short(text)}: {exc}", word.line))
            i += 1
            continue
        settings.append(Setting(parsed.prefix, parsed.key, parsed.value, word.line, text))
        i += 1
    return Launch(entry, config_path, config_name, settings, command.line, via_ray, unknown)


def _argument(text: str) -> str:
    """An argument whose value is not known, by its key (`data.train_files=...`) when it has one."""
    key, sep, _ = text.partition("=")
    if sep and "<unknown" not in key and _is_key(key):
        return f"argument {key}=..."
    return "an argument" if text.startswith("<unknown") else f"argument {_short(text)}"


def _is_key(key: str) -> bool:
    return bool(re.fullmatch(r"[+~]{0,2}[\w.@/-]+", key))


def _short(text: str) -> str:
    return text if len(text) <= 60 else text[:57] + "..."
