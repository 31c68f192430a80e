"""SwanLab where the training runs: installed, logged in, checked — the key only ever on stdin.

Seed 001 stage 5 does `echo KEY | swanlab login --host H` inside the container; this does the
same without the key in any argv (`ps` shows argv to every user): the key is written to the
login command's standard input. Proxies reach pip by name (`docker exec -e http_proxy`), so
their values are not in argv either.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field

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


def setup_swanlab(spec: RunSpec, key: str) -> SetupReport:
    """Install swanlab if missing, log in with the key on stdin, verify the login file exists."""
    where = f"container {spec.container}" if spec.container else "this host"
    report = SetupReport(where)
    proxies = {name: getattr(spec, name) for name in ("http_proxy", "https_proxy") if getattr(spec, name)}
    env = {**os.environ, **proxies}
    version = run(_argv(spec, ["swanlab", "--version"]), 60, env=env)
    if not version.ok:
        report.steps.append(f"swanlab missing in {where}: pip install swanlab")
        install = run(_argv(spec, ["pip", "install", "swanlab"], env_names=tuple(proxies)), 600, env=env)
        if not install.ok:
            raise SwanLabSetupError(f"pip install swanlab failed in {where}: {_tail(install)}",
                                    "check the network or pass --http-proxy/--https-proxy")
        report.installed_now = True
    else:
        report.steps.append(f"swanlab {version.stdout.strip().split()[-1] if version.stdout.strip() else ''} in {where}")
    login = ["swanlab", "login"] + (["--host", spec.swanlab_host] if spec.swanlab_host else [])
    result = run(_argv(spec, login, stdin=True), 120, input=key + "\n", env=env)
    if not result.ok:
        raise SwanLabSetupError(f"swanlab login failed in {where}: {_tail(result)}",
                                "check the API key and --swanlab-host (`verl-deploy check --swanlab yes` tests the host)")
    report.steps.append(f"logged in{' to ' + spec.swanlab_host if spec.swanlab_host else ''} (key on stdin)")
    listing = run(_argv(spec, ["sh", "-c", "ls -a ~/.swanlab 2>/dev/null"]), 60, env=env)
    if not set(listing.stdout.split()) & set(LOGIN_FILES):
        raise SwanLabSetupError(f"swanlab login left no login file in ~/.swanlab ({where})",
                                "run `swanlab login` by hand there and look at its message")
    report.steps.append("login verified (~/.swanlab)")
    return report
