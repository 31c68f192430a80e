"""The entry import start_verl.sh does before Ray starts, done before launch, where the training will run.

`verify` imports the entry module too, but only where verl itself imports; a host whose python3 lacks
Ray (or verl) would pass it as "verify unavailable" and then fail at the script's own import check,
one launch later. Here the same `python3 -c 'import importlib...'` runs from the run directory (in the
container through `docker exec -w`), and its error says what is missing and what to do about it: a
missing package is an environment failure, never a fault in the run's config.
"""

from __future__ import annotations

import os
import re
import subprocess

from verl_deploy.findings import Finding, error, info

IMPORT = "import importlib, sys; importlib.import_module(sys.argv[1])"
TIMEOUT = 120.0
MISSING = re.compile(r"No module named '([^']+)'")
DOCKER_DOWN = ("Cannot connect to the Docker daemon", "Is the docker daemon running", "error during connect")


def docker_down(text: str) -> bool:
    return any(marker in text for marker in DOCKER_DOWN)


DOCKER_FIX = "start Docker (`sudo systemctl start docker`), or pass --no-verify to launch without verl's validation"


def last_error_line(stderr: str) -> str:
    """The exception line of a traceback (the last line that is not indented), as start_verl.sh prints it."""
    lines = [line for line in stderr.strip().splitlines() if line.strip() and not line.startswith(" ")]
    return lines[-1][:400] if lines else stderr.strip()[-400:]


def missing_package_fix(module: str, entry: str, where: str, container: str | None) -> str:
    """How to get the module `entry` imports into the python3 the training runs."""
    top = module.split(".")[0]
    how = f"`docker exec {container} python3 -m pip install {top}`" if container else f"`python3 -m pip install {top}`"
    if top == "verl":
        return (f"verl itself does not import for python3 on the {where}: install verl there (`python3 -m pip "
                f"install -e .` in the verl checkout of this release, or verl's image with --container NAME)")
    return f"python3 on the {where} lacks {top}, which {entry} imports: install it there ({how}) or run where verl's " \
           "dependencies are installed (--container NAME with verl's image)"


def entry_findings(plan, *, container: str | None = None) -> list[Finding]:
    """[] when the entry module imports where the training runs; else one error naming what is missing."""
    from verl_deploy.render import entry_fix

    spec = plan.spec
    entry, run_dir = plan.entry_module, spec.run_dir
    where = f"container {container}" if container else "host"
    if container:
        argv = ["docker", "exec", "-w", run_dir, container, "python3", "-c", IMPORT, entry]
        cwd = None
    else:
        if not os.path.isdir(run_dir):
            return [error("run_dir", f"the run directory {run_dir} does not exist on this host: the scripts start "
                                     f"{entry} from there", "pass --run-dir with the verl source root (or --container "
                                                            "NAME when verl is in a container)", area="environment")]
        argv, cwd = ["python3", "-c", IMPORT, entry], run_dir
    try:
        done = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT, errors="replace",
                              stdin=subprocess.DEVNULL, env={**os.environ, "RAY_USAGE_STATS_ENABLED": "0"})
    except FileNotFoundError:
        return [error("entry", f"{argv[0]} is not on PATH here: the scripts run {entry} with python3",
                      "install python3 (or docker, for --container) where the training runs", area="environment")]
    except subprocess.TimeoutExpired:
        return [info("entry", f"importing {entry} on the {where} took longer than {TIMEOUT:g} s; not checked",
                     area="environment")]
    if done.returncode == 0:
        return [info("entry", f"{entry} imports from {run_dir} on the {where}", area="environment")]
    said = done.stderr.strip()
    if container and ("No such container" in said or "is not running" in said):
        return [info("entry", f"container {container} is not running yet: the entry import is checked when launch "
                              "has started it", area="environment")]
    if container and docker_down(said):
        return [error("docker", f"the Docker daemon does not answer ({last_error_line(said)})",
                      "start Docker (`sudo systemctl start docker`)", area="environment")]
    line = last_error_line(said)
    missing = MISSING.search(line)
    entry_file = os.path.join(run_dir, *entry.split(".")) + ".py"
    ours = missing is not None and (entry.startswith(missing.group(1) + ".") or entry == missing.group(1))
    if (not container and not os.path.isfile(entry_file)) or ours:
        fix = entry_fix(plan)
    elif missing:
        fix = missing_package_fix(missing.group(1), entry, where, container)
    else:  # the file is there but does not fit this verl (a recipe of another release): the checkout's fix
        fix = entry_fix(plan)
    return [error("entry", f"{entry} does not import from {run_dir} on the {where}: {line}", fix, area="environment")]
