"""Redacting secrets from text that leaves this host (an issue bundle): known values and secret shapes.

Two kinds of secret are removed. Values this tool can know: the SwanLab key (SWANLAB_API_KEY, the
0600 key file, a run's swanlab.env), the Ray token (rayauth: RAY_AUTH_TOKEN, its file, a run's
ray_auth_token) and the value of any environment variable whose name says it is a secret. And
shapes, wherever the training printed them: passwords and tokens in URLs (`https://u:p@host`,
`?token=...`), `NAME=value` / `"name": "value"` where the name says secret, `Bearer ...`, plus
the patterns the user configured (VERL_DEPLOY_SECRET_PATTERNS, one regular expression a line,
and the file `secret_patterns` in the config dir).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path

from verl_deploy import boundedread
from verl_deploy.secrets import is_secret_name, load_swanlab_key
from verl_deploy.statedir import config_dir

MARK = "[REDACTED]"
PATTERNS_ENV = "VERL_DEPLOY_SECRET_PATTERNS"
PATTERNS_FILE = "secret_patterns"
MIN_VALUE = 6  # shorter "secrets" (a test's "1", an empty token) would redact half the bundle
SECRET_FILES = ("swanlab.env", "ray_auth_token")  # written 0600 beside a run's scripts: never copied

# a name that ends in a secret word (SWANLAB_API_KEY, hf_token, db.password), not KeyError, max_tokens or pad_token
NAME = (r"(?<![A-Za-z0-9_.\-])(?![A-Za-z0-9_.\-]*?(?:pad|eos|bos|unk|cls|sep|mask)_token\b)"
        r"[A-Za-z0-9_.\-]*(?:token|key|secret|password|passwd|apikey)(?![A-Za-z0-9_])")
SHAPES = [
    re.compile(r"(?P<keep>\b[a-z][a-z0-9+.\-]*://[^\s/@:]*:)[^\s/@]+(?=@)", re.IGNORECASE),  # scheme://user:PASS@
    re.compile(r"(?P<keep>[?&;]" + NAME + r"=)(?!\[REDACTED\])[^&\s\"'#]+", re.IGNORECASE),  # ?token=VALUE in a URL
    re.compile(r"(?P<keep>\bBearer\s+)[A-Za-z0-9._~+/=\-]+", re.IGNORECASE),  # Authorization: Bearer VALUE
    # NAME=VALUE, NAME: VALUE, "name": "value", --name VALUE where the name says secret (SWANLAB_API_KEY=..., api_key: ...)
    re.compile(r"(?P<keep>[\"']?" + NAME + r"[\"']?\s*[=:]\s*[\"']?)"
               r"(?![\"']?(?:\*\*\*\*|\[REDACTED\]|(?:None|null|true|false)\b))[^\s\"',;}\]]{4,}",
               re.IGNORECASE),
]


class PatternError(ValueError):
    """A configured secret pattern is not a regular expression: one line naming where it came from."""


def configured_patterns(environ: Mapping[str, str] | None = None) -> list[re.Pattern]:
    """The user's own secret patterns: VERL_DEPLOY_SECRET_PATTERNS and the config dir's `secret_patterns`."""
    environ = os.environ if environ is None else environ
    sources: list[tuple[str, str]] = [(f"${PATTERNS_ENV}", environ.get(PATTERNS_ENV, ""))]
    path = config_dir() / PATTERNS_FILE
    try:
        sources.append((str(path), boundedread.read_text(path, 1 << 20)))
    except FileNotFoundError:
        pass
    except boundedread.UnreadableFile as exc:
        raise PatternError(str(exc)) from None
    patterns = []
    for where, text in sources:
        for number, line in enumerate(text.splitlines(), 1):
            if not line.strip() or line.lstrip().startswith("#"):
                continue
            try:
                patterns.append(re.compile(line.strip()))
            except re.error as exc:
                raise PatternError(f"{where} line {number} is not a regular expression ({exc})") from None
    return patterns


def env_file_values(path: Path) -> list[str]:
    """The values of a KEY=VALUE file (swanlab.env) or a one-line token file; [] when it cannot be read."""
    try:
        text = boundedread.read_text(path, 1 << 16)
    except (OSError, boundedread.UnreadableFile):
        return []
    values = []
    for line in text.splitlines():
        line = line.strip().removeprefix("export ").strip()
        value = line.partition("=")[2] if "=" in line else line
        values.append(value.strip().strip("'\""))
    return values


def known_values(environ: Mapping[str, str] | None = None, files: Iterable[Path] = ()) -> list[str]:
    """Every secret value this tool can find: the SwanLab key, the Ray token, secret-named variables, secret files."""
    from verl_deploy.rayauth import AuthError, find_token

    environ = os.environ if environ is None else environ
    values = [value for name, value in environ.items() if is_secret_name(name)]
    try:
        values.append(load_swanlab_key() or "")
    except boundedread.UnreadableFile:
        pass
    try:
        token = find_token(environ)
    except (AuthError, OSError, boundedread.UnreadableFile):
        token = None
    if token is not None:
        values.append(token.value)
    for path in files:
        values += env_file_values(path)
    return sorted({v for v in values if len(v) >= MIN_VALUE}, key=len, reverse=True)


class Redactor:
    """Replaces known values and secret shapes by [REDACTED]; counts what it replaced."""

    def __init__(self, values: Iterable[str] = (), patterns: Iterable[re.Pattern] = ()):
        self.values = sorted({v for v in values if len(v) >= MIN_VALUE}, key=len, reverse=True)
        self._values = re.compile("|".join(re.escape(v) for v in self.values)) if self.values else None
        self.patterns = list(patterns)
        self.count = 0

    def __call__(self, text: str) -> str:
        if self._values is not None:
            text, n = self._values.subn(MARK, text)
            self.count += n
        for shape in SHAPES:
            text, n = shape.subn(lambda m: m.group("keep") + MARK, text)
            self.count += n
        for pattern in self.patterns:
            text, n = pattern.subn(MARK, text)
            self.count += n
        return text

    def leaks(self, text: str) -> int:
        """How many known values are still in `text` (a bundle's own last check)."""
        return sum(1 for v in self.values if v in text)
