"""Ray's token authentication (Ray 2.52+), found and sent the way Ray 2.60's own clients do it.

Read from Ray 2.60 (`ray/_private/authentication/`, the C++ AuthenticationTokenLoader in `_raylet.so`):
- the token: `RAY_AUTH_TOKEN`, else the first line of the file `RAY_AUTH_TOKEN_PATH` names (set but
  unreadable or empty is an error, no fall-through), else `~/.ray/auth_token` ($HOME); whitespace trimmed;
- HTTP (dashboard, Jobs API): header `Authorization: Bearer <token>`; the dashboard answers 401 when it is
  missing, 403 when it is wrong; `/api/authentication_mode` is public and says `token` or `disabled`;
- gRPC (GCS: `ray start`, `ray status`, a driver's `ray.init`): sent only when `RAY_AUTH_MODE=token` is in
  that process's environment. `ray start --head` with RAY_AUTH_MODE unset turns token mode on when a token
  is found; `ray.init()` with RAY_ADDRESS set never does. So the scripts export RAY_AUTH_MODE explicitly.

The token is a secret like the SwanLab key: it never goes into argv, a script, a log, plan.json, a record
or output. It travels in a request header, an environment variable or a 0600 file.
"""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Mapping

from verl_deploy import boundedread

TOKEN_ENV = "RAY_AUTH_TOKEN"
PATH_ENV = "RAY_AUTH_TOKEN_PATH"
MODE_ENV = "RAY_AUTH_MODE"
MODES = ("token", "disabled")
MAX_TOKEN_BYTES = 64 << 10  # Ray's tokens are 32 hex characters; a file holding one is tiny
TOKEN_FILE = "ray_auth_token"  # beside the scripts of a run whose Ray spans nodes or containers: mode 0600

Mode = Literal["token", "disabled"]

HOW_TO_SET = ("set RAY_AUTH_TOKEN to the cluster's token, or RAY_AUTH_TOKEN_PATH to a file holding it, "
              "or put it in ~/.ray/auth_token (`ray get-auth-token` on the head prints it)")


class AuthError(Exception):
    """What is missing or wrong (`problem`) and the variables to set (`fix`): one line, never the token."""

    def __init__(self, problem: str, fix: str = HOW_TO_SET):
        super().__init__(f"{problem} — fix: {fix}")
        self.problem, self.fix = problem, fix


@dataclass(frozen=True)
class Token:
    value: str = field(repr=False)
    source: str  # where it came from, for messages: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH (PATH), ~/.ray/auth_token

    def header(self) -> dict[str, str]:
        return {"Authorization": "Bearer " + self.value}


def default_path(environ: Mapping[str, str] | None = None) -> Path:
    environ = os.environ if environ is None else environ
    return Path(environ.get("HOME") or ".") / ".ray" / "auth_token"


def _first_line(path: str | os.PathLike, label: str) -> str:
    text = boundedread.read_text(path, MAX_TOKEN_BYTES, label)
    return (text.splitlines() or [""])[0].strip()


def find_token(environ: Mapping[str, str] | None = None) -> Token | None:
    """The token by Ray's precedence; None when there is none; AuthError when RAY_AUTH_TOKEN_PATH is set but
    gives none (Ray refuses that too, instead of falling back to ~/.ray/auth_token)."""
    environ = os.environ if environ is None else environ
    value = environ.get(TOKEN_ENV, "")
    if value.strip():
        return Token(value.strip(), TOKEN_ENV)
    named = environ.get(PATH_ENV, "")
    if named:
        try:
            value = _first_line(named, f"{PATH_ENV} file {named}")
        except FileNotFoundError:
            raise AuthError(f"{PATH_ENV} is set but {named} does not exist",
                            f"point {PATH_ENV} at the file holding the cluster's token, or unset it") from None
        except boundedread.UnreadableFile as exc:
            raise AuthError(str(exc), f"point {PATH_ENV} at a readable file holding the token, or unset it") from None
        if not value:
            raise AuthError(f"{PATH_ENV} is set but {named} is empty", "put the cluster's token in it, or unset it")
        return Token(value, f"{PATH_ENV} ({named})")
    path = default_path(environ)
    try:
        value = _first_line(path, str(path))
    except FileNotFoundError:
        return None
    except (boundedread.UnreadableFile, NotADirectoryError) as exc:
        raise AuthError(f"the Ray token file {exc}", f"fix or remove it, or {HOW_TO_SET}") from None
    return Token(value, "~/.ray/auth_token") if value else None


def local_mode(environ: Mapping[str, str] | None = None) -> Mode | None:
    """RAY_AUTH_MODE of this environment (token / disabled), None when unset; AuthError for another value."""
    environ = os.environ if environ is None else environ
    raw = environ.get(MODE_ENV, "").strip().lower()
    if not raw:
        return None
    if raw not in MODES:
        raise AuthError(f"{MODE_ENV}={raw[:40]!r} is not a Ray authentication mode",
                        f"set {MODE_ENV} to token or disabled, or unset it")
    return raw  # type: ignore[return-value]


def scripts_mode(environ: Mapping[str, str] | None = None) -> tuple[Mode, str]:
    """(mode, why) for a Ray head the scripts start: as Ray 2.60's `ray start --head` decides it here."""
    environ = os.environ if environ is None else environ
    explicit = local_mode(environ)
    if explicit is not None:
        return explicit, f"env {MODE_ENV}"
    token = find_token(environ)
    if token is not None:
        return "token", f"detected (a Ray token in {token.source}: Ray's `ray start --head` turns token auth on)"
    return "disabled", "detected (no Ray token here: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token)"


def _open(request: urllib.request.Request, timeout: float):
    return urllib.request.urlopen(request, timeout=timeout)


def cluster_mode(address: str, timeout: float = 10) -> Mode | None:
    """What the dashboard says of itself (its public /api/authentication_mode); None when it does not say
    (Ray before 2.52, or something in front of it)."""
    try:
        with _open(urllib.request.Request(address.rstrip("/") + "/api/authentication_mode"), timeout) as response:
            data = json.loads(response.read(4096))
    except (OSError, ValueError):
        return None
    mode = data.get("authentication_mode") if isinstance(data, dict) else None
    return mode if mode in MODES else None


def headers_for(address: str, environ: Mapping[str, str] | None = None, timeout: float = 10) -> dict[str, str]:
    """The headers a request to this cluster's dashboard carries: the token when this side says
    RAY_AUTH_MODE=token, or when the cluster says it wants one; nothing when RAY_AUTH_MODE=disabled.
    A token of one cluster is never sent to a cluster that does not ask for it. AuthError when one is
    wanted and none is found."""
    environ = os.environ if environ is None else environ
    mode = local_mode(environ)
    if mode == "disabled":
        return {}
    if mode is None and cluster_mode(address, timeout) != "token":
        return {}
    token = find_token(environ)
    if token is None:
        wants = "RAY_AUTH_MODE=token is set" if mode == "token" else f"{address} uses token authentication"
        raise AuthError(f"{wants} but no Ray token was found here")
    return token.header()


def refusal(status: int, address: str, environ: Mapping[str, str] | None = None) -> AuthError | None:
    """The error for the dashboard's 401 / 403 (None for any other status); never the token."""
    environ = os.environ if environ is None else environ
    if status == 401:
        if local_mode_quiet(environ) == "disabled":
            return AuthError(f"{address} wants a Ray token and none was sent (RAY_AUTH_MODE=disabled here)",
                             f"unset RAY_AUTH_MODE or set it to token, and {HOW_TO_SET}")
        try:
            have = find_token(environ)
        except AuthError:
            have = None
        if have is not None:  # the cluster did not say it wants one (Ray before 2.52, or a proxy in front)
            return AuthError(f"{address} wants a Ray token but did not say so, and the one in {have.source} "
                             "was not sent", "set RAY_AUTH_MODE=token to send it")
        return AuthError(f"{address} wants a Ray token and none was sent")
    if status == 403:
        try:
            token = find_token(environ)
        except AuthError:
            token = None
        source = f" from {token.source}" if token else ""
        return AuthError(f"{address} rejects the Ray token{source} (not this cluster's)",
                         "set RAY_AUTH_TOKEN, or RAY_AUTH_TOKEN_PATH to a file holding it, to the cluster's token "
                         "(`ray get-auth-token` on the head prints it)")
    return None


def local_mode_quiet(environ: Mapping[str, str]) -> Mode | None:
    try:
        return local_mode(environ)
    except AuthError:
        return None


def get_json(address: str, path: str, timeout: float = 10, limit: int = 16 << 20,
             environ: Mapping[str, str] | None = None) -> object:
    """GET a dashboard path as JSON with the cluster's token; AuthError (one line) for a missing or wrong one."""
    request = urllib.request.Request(address.rstrip("/") + path, headers=headers_for(address, environ, timeout))
    try:
        with _open(request, timeout) as response:
            return json.loads(response.read(limit))
    except urllib.error.HTTPError as exc:
        refused = refusal(exc.code, address, environ)
        if refused:
            raise refused from None
        raise


def gcs_environment(mode: Mode, environ: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for a `ray` command that talks to a head in `mode` (gRPC sends the token only with
    RAY_AUTH_MODE=token); the token itself stays where Ray finds it."""
    environ = os.environ if environ is None else environ
    return {**environ, MODE_ENV: mode}


def token_file_text(environ: Mapping[str, str] | None = None) -> str:
    """The content of the 0600 file that hands this host's token to the run's other nodes and containers
    (start_verl.sh points RAY_AUTH_TOKEN_PATH at it); AuthError when there is no token here."""
    token = find_token(environ)
    if token is None:
        raise AuthError("token authentication is on but no Ray token was found here to hand to the run's nodes",
                        HOW_TO_SET + "; `ray get-auth-token --generate` makes one")
    return token.value + "\n"
