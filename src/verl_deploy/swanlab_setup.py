"""SwanLab where the training runs: installed (only with consent), logged in, checked; the key only on stdin.

`swanlab login` takes a key only from `--api-key` (argv: `ps` shows it to every user) or a terminal
prompt: piped to it, swanlab 0.10.3 answers "Cannot prompt for API Key in no-tty environment"
(swanlab/sdk/cmd/login.py, prompt_api_key). So the login is swanlab's Python API,
`swanlab.login(api_key=..., save=True)`, run by the python3 the training runs, which reads the key
from its standard input; the host reaches swanlab as its own settings read it (SWANLAB_API_HOST /
SWANLAB_WEB_HOST, swanlab_env.py), passed by name. Proxies reach pip by name too.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from typing import Callable

from verl_deploy.preflight.commands import Result, run
from verl_deploy.spec import RunSpec

LOGIN_FILES = ("netrc", ".netrc", "config.json")


class SwanLabSetupError(Exception):
    """One line for the user, with what to do in `fix`."""

    def __init__(self, message: str, fix: str):
        super().__init__(message)
        self.fix = fix


@dataclass
class SetupReport:
    where: str
    installed_now: bool = False
    steps: list[str] = field(default_factory=list)


def _argv(spec: RunSpec, argv: list[str], *, stdin: bool = False, env_names: tuple[str, ...] = ()) -> list[str]:
    if not spec.container:
        return argv
    flags = ["-i"] if stdin else []
    for name in env_names:
        flags += ["-e", name]  # the value comes from our environment, not from argv
    return ["docker", "exec", *flags, "--", spec.container, *argv]


def _tail(result: Result) -> str:
    lines = (result.stderr.strip() or result.stdout.strip()).splitlines()
    if lines:
        return lines[-1][:200]
    return "command not found" if result.missing else ("timed out" if result.timed_out else f"exit {result.returncode}")


# the swanlab installed when the user agrees: the version this tool's tests run against the real package
SWANLAB_PIN = "swanlab==0.10.3"

PROBE = "import swanlab; print(getattr(swanlab, '__version__', '?'))"

# The key is the first line of stdin; nothing of it is printed. save=True keeps the login for verl's
# tracker (swanlab's own netrc file); the keyword set differs by swanlab version, so the call adapts.
LOGIN = r"""
import inspect, json, os, sys
import swanlab
key = sys.stdin.readline().strip()
accepted = inspect.signature(swanlab.login).parameters
kwargs = {name: value for name, value in (("relogin", True), ("save", True)) if name in accepted}
try:
    ok = swanlab.login(api_key=key, **kwargs)
except Exception as exc:
    print("LOGIN-FAILED " + type(exc).__name__ + ": " + str(exc).replace(key, "***")[:300], flush=True)
    sys.exit(1)
saved = None
try:
    from swanlab.sdk.cmd.utils import get_nrc_path
    saved = str(get_nrc_path(True))
except Exception:
    pass
print("LOGIN " + json.dumps({"ok": ok is not False, "saved": saved if saved and os.path.exists(saved) else None}))
"""


def _login_env(spec: RunSpec) -> dict[str, str]:
    """SWANLAB_API_HOST / SWANLAB_WEB_HOST for a private host, exactly as start_verl.sh exports them."""
    from verl_deploy.swanlab_env import hosts

    derived = hosts(spec.swanlab_host)
    return {} if derived is None else {"SWANLAB_API_HOST": derived[0], "SWANLAB_WEB_HOST": derived[1]}


REFUSED = ("Connection refused", "ConnectionError", "Max retries exceeded", "Failed to establish a new connection",
           "Name or service not known", "timed out", "No route to host")


def host_fix(spec: RunSpec) -> str:
    """What to do when the SwanLab host does not answer: fix the host, or log locally and sync later."""
    log_dir = spec.effective_swanlab_log_dir
    return (f"fix --swanlab-host (or open the route to it); or run with --swanlab-mode local: the run logs to "
            f"{log_dir} and shows `swanlab watch {log_dir}` instead of a link; upload later with "
            f"`swanlab sync {log_dir}/<run folder>`")


def host_problem(spec: RunSpec, timeout: float = 3.0) -> str | None:
    """None when the SwanLab host answers; else what is wrong with it, in one line."""
    from verl_deploy.preflight.host import SWANLAB_CLOUD, reachable

    url = spec.swanlab_host or SWANLAB_CLOUD
    up, detail = reachable(url, timeout=timeout)
    return None if up else f"the SwanLab host {url} refuses connections: {detail}"


def preflight_findings(spec: RunSpec, *, check_host: bool = True) -> list:
    """What launch's SwanLab login would stop on, found before anything starts: host, key, the package."""
    from verl_deploy.findings import error
    from verl_deploy.preflight.host import swanlab_logged_in

    found = []
    if check_host:
        problem = host_problem(spec)
        if problem:
            found.append(error("swanlab_host", problem, host_fix(spec), area="swanlab"))
        if not (spec.swanlab_api_key or swanlab_logged_in()):
            found.append(error("swanlab_api_key", "no API key: SWANLAB_API_KEY unset and no `swanlab login` here",
                               "set SWANLAB_API_KEY in the command's environment, or pipe it: --swanlab-api-key -",
                               area="swanlab"))
    where = f"container {spec.container}" if spec.container else "this host"
    probe = run(_argv(spec, ["python3", "-c", PROBE]), 60)
    absent = spec.container and ("No such container" in probe.stderr or "is not running" in probe.stderr)
    if not probe.ok and not absent:
        found.append(error("swanlab", f"swanlab is not importable by python3 in {where} (the training's tracker "
                                      f"needs it): {_tail(probe)}",
                           f"`verl-deploy swanlab login --install-missing{' --container ' + spec.container if spec.container else ''}` "
                           f"installs {SWANLAB_PIN} there, or --swanlab no", area="environment"))
    return found


def setup_swanlab(spec: RunSpec, key: str, *, install: Callable[[str], bool] = lambda where: False) -> SetupReport:
    """Install swanlab if missing and `install(where)` agrees, log in with the key on stdin, check the login.

    `install` is the user's consent (`--install-missing`, or a yes at a prompt); without it nothing is
    installed and the missing package is one error naming the fix.
    """
    where = f"container {spec.container}" if spec.container else "this host"
    report = SetupReport(where)
    proxies = {name: getattr(spec, name) for name in ("http_proxy", "https_proxy") if getattr(spec, name)}
    hosts_env = _login_env(spec)
    env = {**os.environ, **proxies, **hosts_env}
    _ensure_installed(spec, report, install, proxies, env)
    result = run(_argv(spec, ["python3", "-c", LOGIN], stdin=True, env_names=tuple(hosts_env)), 120,
                 input=key + "\n", env=env)
    outcome = _login_line(result.stdout)
    if not result.ok or outcome is None or not outcome.get("ok"):
        raise _login_failure(spec, result, key, where)
    report.steps.append(f"logged in{' to ' + spec.swanlab_host if spec.swanlab_host else ''} (key on stdin)")
    if outcome.get("saved"):
        report.steps.append(f"login verified ({outcome['saved']})")
        return report
    listing = run(_argv(spec, ["sh", "-c", "ls -a ~/.swanlab 2>/dev/null"]), 60, env=env)
    if not set(listing.stdout.split()) & set(LOGIN_FILES):
        raise SwanLabSetupError(f"swanlab login left no login file in ~/.swanlab ({where})",
                                "run `swanlab login` by hand there and look at its message")
    report.steps.append("login verified (~/.swanlab)")
    return report


def _ensure_installed(spec: RunSpec, report: SetupReport, install: Callable[[str], bool], proxies: dict[str, str],
                      env: dict[str, str]) -> None:
    """swanlab importable where the training runs; installed (pinned) only with the user's consent."""
    where = report.where
    version = run(_argv(spec, ["python3", "-c", PROBE]), 60, env=env)
    if version.ok:
        report.steps.append(f"swanlab {version.stdout.strip().split()[-1] if version.stdout.strip() else ''} in {where}")
        return
    if not install(where):
        raise SwanLabSetupError(f"swanlab is not installed in {where} (python3 there cannot import it); "
                                "nothing was installed",
                                f"`verl-deploy swanlab login --install-missing` installs {SWANLAB_PIN} there (or install "
                                "it yourself)")
    report.steps.append(f"swanlab missing in {where}: pip install {SWANLAB_PIN}")
    installed = run(_argv(spec, ["python3", "-m", "pip", "install", SWANLAB_PIN], env_names=tuple(proxies)),
                    600, env=env)
    if not installed.ok:
        raise SwanLabSetupError(f"pip install {SWANLAB_PIN} failed in {where}: {_tail(installed)}",
                                "check the network or pass --http-proxy/--https-proxy")
    report.installed_now = True


def _login_failure(spec: RunSpec, result: Result, key: str, where: str) -> SwanLabSetupError:
    """Why the login failed, in one line: an unreachable host before what swanlab made of it; the key masked."""
    failed = next((line[13:] for line in result.stdout.splitlines() if line.startswith("LOGIN-FAILED ")), None)
    said = (failed or _tail(result)).replace(key, '***')
    unreachable = host_problem(spec)  # what swanlab makes of a refused connection is not the cause: say that
    if unreachable:
        return SwanLabSetupError(f"swanlab login in {where} failed: {unreachable}", host_fix(spec))
    if any(marker in said for marker in REFUSED):
        return SwanLabSetupError(f"swanlab login in {where} could not reach the SwanLab host "
                                 f"{spec.swanlab_host or 'swanlab.cn'}: {said}", host_fix(spec))
    return SwanLabSetupError(f"swanlab login failed in {where}: {said}",
                             "check the API key and --swanlab-host (`verl-deploy check --swanlab yes` tests the host)")


def _login_line(stdout: str) -> dict | None:
    line = next((line for line in stdout.splitlines() if line.startswith("LOGIN ")), None)
    try:
        data = json.loads(line[6:]) if line else None
    except ValueError:
        return None
    return data if isinstance(data, dict) else None
