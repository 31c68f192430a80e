"""Shared test helpers: the verl config cache, stub `python3`/`ray` on PATH, running the real CLI."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

import verlzygote

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = Path(__file__).parent / "fixtures"
# verl's wheels are fetched once per machine into this cache (real configs, no verl code run).
os.environ.setdefault("VERL_DEPLOY_CACHE_DIR", str(ROOT / ".pytest_cache" / "verl-deploy"))
# Facts a developer's own `verl-deploy check` saved must not leak into the tests' plans.
os.environ["VERL_DEPLOY_STATE_DIR"] = tempfile.mkdtemp(prefix="verl-deploy-state-")
os.environ["VERL_DEPLOY_CONFIG_DIR"] = tempfile.mkdtemp(prefix="verl-deploy-config-")  # no stored SwanLab key
for name in list(os.environ):
    if name in {"FRAMEWORK", "MODEL_PATH", "TRAIN_FILE", "VAL_FILE", "TEST_FILE", "TRAIN_STEPS", "TRAINER_GPUS",
                "ROLLOUT_GPUS", "USER_FEATURES", "MAX_OOM_RETRIES", "MAX_RESPONSE_LENGTH", "ENABLE_OFFLOAD",
                "SWANLAB_HOST", "SWANLAB_API_KEY", "CONTAINER", "CKPTS_DIR", "PROJECT_NAME", "SWANLAB_MODE",
                "SWANLAB_WORKSPACE", "SWANLAB_LOG_DIR", "http_proxy", "https_proxy"}:
        del os.environ[name]
# Ray's token authentication is a machine state (a ~/.ray/auth_token left by any ray.init() turns it on): the suite
# runs with it off unless a test sets the mode it tests (tests/test_ray.py: ray_env, without_ray_auth).
for name in ("RAY_AUTH_TOKEN", "RAY_AUTH_TOKEN_PATH"):
    os.environ.pop(name, None)
os.environ["RAY_AUTH_MODE"] = "disabled"

VERL_BIN = [sys.executable, "-m", "verl_deploy"]

# The test environment's own bin: the README's command installs every tool the tests run there (ray, py-spy,
# shellcheck); a tool found only on the base PATH would pass here and fail on a new machine.
ENV_BIN = Path(sys.executable).parent


def env_tool(name: str) -> str:
    """The path of NAME as the test environment installed it (its bin beside this interpreter), or ''."""
    candidate = ENV_BIN / name
    return str(candidate) if candidate.is_file() else ""


def python_shim(bin_dir: Path, name: str = "python3") -> Path:
    """A `python3` on PATH that is this test environment's interpreter, packages and all.

    A symlink to a virtualenv's python placed outside the venv finds no pyvenv.cfg beside it and runs
    as the base interpreter (without swanlab, ray, ...); a script that execs sys.executable keeps the venv.
    """
    bin_dir.mkdir(parents=True, exist_ok=True)
    shim = bin_dir / name
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" "$@"\n')
    shim.chmod(0o755)
    return shim

STUB_PYTHON = """#!/usr/bin/env bash
# stands in for verl's python3: records argv (NUL separated), cwd and environment
if [ "$1" = -c ]; then  # start_verl.sh's entry import check
    printf '%s\\n' "$*" >> "$STUB_LOG/python3.checks"
    [ -z "${STUB_IMPORT_ERROR:-}" ] || { echo "$STUB_IMPORT_ERROR" >&2; exit 1; }
    exit 0
fi
printf '%s\\0' "$@" > "$STUB_LOG/python3.argv"
pwd > "$STUB_LOG/python3.cwd"
env > "$STUB_LOG/python3.env"
exit "${STUB_EXIT:-0}"
"""
STUB_RAY = """#!/usr/bin/env bash
# stands in for ray: records each call; `ray status` says no cluster unless STUB_RAY_UP=1
printf '%s\\n' "$*" >> "$STUB_LOG/ray.calls"
if [ "$1" = status ]; then [ "${STUB_RAY_UP:-0}" = 1 ]; exit $?; fi
exit 0
"""


def skip_module_without(package: str, reason: str = "") -> None:
    """Skip the calling test module where PACKAGE is not installed, without importing it: collection runs in each
    xdist worker, and `pytest.importorskip("torch")` there was 1.3 CPU-s a worker (Ray 0.4, SwanLab 0.5)."""
    if importlib.util.find_spec(package) is None:
        pytest.skip(reason or f"{package} is not installed (pip install '.[test]')", allow_module_level=True)


# Commands that own their process: launch, status and logs may start a supervisor, which must be the child of a
# process that exits (init reaps it), not of the test process (where it would linger as a zombie that still "exists"
# for kill(pid, 0)). They run in a forked child of the test process (tests/inprocess.run_forked), which is such a
# process without a new interpreter. The supervisor itself gets a new interpreter: supervisor_alive() knows it by
# its command line, which a forked child would not have.
FORKED_COMMANDS = {"launch", "status", "logs"}
NEW_INTERPRETER_COMMANDS = {"_supervise"}


def _pythonpath_modules(pythonpath: str) -> set[str]:
    """The top-level names PYTHONPATH's folders hold (package metadata left out): what a new interpreter given it
    could import that this process's sys.path may not."""
    names: set[str] = set()
    for entry in filter(None, pythonpath.split(os.pathsep)):
        folder = Path(entry)
        if folder.is_dir():
            names |= {child.name.split(".")[0] for child in folder.iterdir() if not child.name.endswith(".dist-info")}
    return names


def child_env(env: dict) -> dict:
    """ENV for a child process, its PYTHONPATH followed by this process's entries: a test's own PYTHONPATH (the
    fake host's torch_npu, a copied tree) comes first, and the tree under test (a worktree's src, which the
    venv's editable install would otherwise replace with the main checkout's) is still imported."""
    ours = [entry for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep) if entry]
    theirs = [entry for entry in str(env.get("PYTHONPATH", "")).split(os.pathsep) if entry]
    if not ours or "PYTHONPATH" not in env:
        return dict(env)
    return {**env, "PYTHONPATH": os.pathsep.join(dict.fromkeys(theirs + ours))}


def run_cli(*args: str, env: dict | None = None, input: str | None = None, cwd: Path | None = None,
            subprocess_only: bool = False, timeout: float = 240):
    """Run the real `verl-deploy` as a user would: in this process through the app's `main` path (tests/inprocess.py),
    in a forked child of it (a command that owns its process, a PYTHONPATH with modules only a child imports), or in
    a subprocess for the installed entry point (subprocess_only, VERL_DEPLOY_TESTS_SUBPROCESS=1, the supervisor, a
    PYTHONPATH holding modules this process already imported)."""
    overrides = dict(env or {})
    pythonpath = overrides.get("PYTHONPATH", "")
    modules = _pythonpath_modules(pythonpath)
    command = args[0] if args else ""
    # a copied tree of verl_deploy is not imported again in a fork, nor does a sitecustomize run: a new interpreter
    anew = (subprocess_only or os.environ.get("VERL_DEPLOY_TESTS_SUBPROCESS") == "1" or command in
            NEW_INTERPRETER_COMMANDS or bool(modules & (set(sys.modules) | {"sitecustomize", "usercustomize"})))
    if not anew and not modules and command not in FORKED_COMMANDS:
        from inprocess import run_in_process

        overrides.setdefault("COLUMNS", os.environ.get("COLUMNS", "200"))
        return run_in_process(list(args), overrides, input, cwd)
    full_env = child_env({**os.environ, **(env or {})})
    full_env.setdefault("COLUMNS", "200")
    if not anew:  # a command that owns its process, or a PYTHONPATH with modules only a child would import
        from inprocess import run_forked

        return run_forked(list(args), full_env, input, cwd, timeout=timeout, path=pythonpath)
    return subprocess.run([*VERL_BIN, *args], capture_output=True, text=True, env=full_env, input=input,
                          cwd=cwd, timeout=timeout)


@pytest.fixture()
def stubs(tmp_path: Path):
    """A PATH with stub python3 and ray, a log dir, and a fake verl source root with recipe files."""
    bin_dir = tmp_path / "stub-bin"
    bin_dir.mkdir()
    for name, text in (("python3", STUB_PYTHON), ("ray", STUB_RAY)):
        path = bin_dir / name
        path.write_text(text)
        path.chmod(0o755)
    log = tmp_path / "stub-log"
    log.mkdir()
    verl_root = tmp_path / "verl-root"
    for module in ("recipe/dapo/main_dapo.py", "recipe/one_step_off_policy/main_ppo.py"):
        (verl_root / module).parent.mkdir(parents=True, exist_ok=True)
        (verl_root / module).write_text("")
    return {"bin": bin_dir, "log": log, "verl_root": verl_root}


def run_scripts(out_dir: Path, stubs: dict, extra_env: dict | None = None) -> subprocess.CompletedProcess:
    env = {"PATH": f"{stubs['bin']}:{os.environ['PATH']}", "STUB_LOG": str(stubs["log"]), "HOME": str(out_dir)}
    env.update(extra_env or {})
    return subprocess.run(["bash", str(out_dir / "start_verl.sh")], capture_output=True, text=True, env=env,
                          timeout=120)


def recorded_argv(stubs: dict) -> list[str]:
    raw = (stubs["log"] / "python3.argv").read_bytes().decode()
    return raw.split("\0")[:-1]


def load_plan(out_dir: Path) -> dict:
    return json.loads((out_dir / "plan.json").read_text())


def has_shellcheck() -> bool:
    return shutil.which("shellcheck") is not None


# -- a fake Ascend host for check / init / launch -------------------------------------------------

FAKES = Path(__file__).parent / "fakes"
HW = FIXTURES / "hw"
# Tiny in size, but with Qwen3-8B's head layout (32 heads, 8 KV groups): the runtime rules check TP against them.
from fakehost import TINY_MODEL, TRAIN_ROWS, make_model, write_train_rows  # noqa: E402,F401  (benchmarks use them too)


def ascend_site(tmp_path: Path) -> Path:
    """torch_npu's metadata for the fake Ascend host's Python, when this Python has (CPU) torch.

    An Ascend host pairs torch with torch_npu of the same release; without this, the CPU torch that the
    verl tests install would make every fake Ascend host "torch without torch_npu" (an error)."""
    import importlib.metadata

    site = tmp_path / "ascend-site"
    site.mkdir(exist_ok=True)
    try:
        torch = importlib.metadata.version("torch").split("+")[0]
    except importlib.metadata.PackageNotFoundError:
        return site
    info = site / f"torch_npu-{torch}.dist-info"
    info.mkdir(exist_ok=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch_npu\nVersion: {torch}\n")
    return site


@pytest.fixture()
def npu_host(tmp_path):
    """A fake Ascend host: 8 idle 910B3 (npu-smi fixture), CANN tree, a model and DAPO data under a search root."""
    root = tmp_path / "mnt"
    make_model(root / "models" / "Qwen3-8B", TINY_MODEL)
    (root / "data").mkdir(parents=True)
    write_train_rows(FIXTURES / "dapo-math-17k.SYNTHETIC.parquet", root / "data" / "dapo-math-17k.parquet", TRAIN_ROWS)
    shutil.copy(FIXTURES / "aime-2024.SYNTHETIC.parquet", root / "data" / "aime-2024.parquet")
    ascend = tmp_path / "Ascend"
    for rel, content in (("ascend-toolkit/set_env.sh", "# CANN\n"), ("nnal/atb/set_env.sh", "# ATB\n"),
                         ("driver/version.info", "Version=24.1.rc2\n"),
                         ("ascend-toolkit/latest/aarch64-linux/ascend_toolkit_install.info",
                          "package_name=Ascend-cann-toolkit\nversion=8.3.RC1\narch=aarch64\n")):
        (ascend / rel).parent.mkdir(parents=True, exist_ok=True)
        (ascend / rel).write_text(content)
    env = {
        "PYTHONPATH": str(ascend_site(tmp_path)),
        "PATH": f"{FAKES}:{Path(sys.executable).parent}:/usr/bin:/bin",
        "FAKE_NPU_SMI": str(HW / "npu-smi-910b3-8npu-idle.txt"),
        "FAKE_DOCKER_PS": str(tmp_path / "ps.jsonl"), "FAKE_DOCKER_IMAGES": str(HW / "docker-images-format-json-docker-docs.jsonl"),
        "VERL_DEPLOY_ASCEND_ROOT": str(ascend), "VERL_DEPLOY_STATE_DIR": str(tmp_path / "state"),
        "VERL_DEPLOY_CONFIG_DIR": str(tmp_path / "config"),
        "HOME": str(tmp_path / "home"),
    }
    (tmp_path / "ps.jsonl").write_text(json.dumps({
        "Command": "\"/bin/bash -c 'sleep…\"", "CreatedAt": "2026-01-10 08:00:00 +0000 UTC", "ID": "0123456789ab",
        "Image": "quay.io/ascend/verl:verl-8.3.rc1-910b-ubuntu22.04-py3.11-v0.7.0", "Labels": "", "LocalVolumes": "0",
        "Mounts": "", "Names": "verl-npu", "Networks": "host", "Ports": "", "RunningFor": "2 hours ago", "Size": "0B",
        "State": "running", "Status": "Up 2 hours"}) + "\n")
    return {"root": root, "env": env, "tmp": tmp_path}




# -- a real, private Docker engine (tests/realdocker.py) ------------------------------------------

@pytest.fixture(scope="session")
def docker_engine():
    """A dockerd of the test session's own (own socket and data root), stopped at the end."""
    from realdocker import Unavailable, import_image, start_engine

    try:
        engine = start_engine()
    except Unavailable as exc:
        pytest.skip(f"no real Docker engine here: {exc}")
    try:
        try:
            engine.image = import_image(engine)
        except Unavailable as exc:
            pytest.skip(f"no test image: {exc}")
        yield engine
    finally:
        engine.stop()


def webhook_server():
    """A JSON webhook on loopback for --notify (apprise's json:// posts here): (server, received, url)."""
    import http.server
    import threading

    received: list = []

    class Hook(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Hook)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, received, f"json://127.0.0.1:{server.server_address[1]}/hook"


# -- tiers and parallel runs (pytest-xdist, `-n` in pyproject's addopts) ----------------------------
# A tier is a mark (`-m "not docker"` leaves it out); a test file whose fixtures start one service for many
# tests (a module- or session-scoped cluster, the session's Docker engine) is one xdist group, so one worker
# owns that service and starts it once. Grouped tests are sent first: they are the long, serial part.
TIERS = {
    "test_docker_real.py": ("docker",), "test_script_failures_docker.py": ("docker",), "test_two_containers.py": ("docker",),
    "test_slurm.py": ("slurm", "ray"), "test_slurm_names.py": ("slurm", "ray"),
    "test_ray.py": ("ray",), "test_ray_nodes.py": ("ray",), "test_ray_ownership.py": ("ray",),
    "test_release_detection.py": ("realverl",), "test_rule_inventory.py": ("realverl",),
    "test_runtime_rules.py": ("realverl",), "test_verify.py": ("realverl",), "test_verify_env.py": ("realverl",),
    "test_verl_accepts.py": ("realverl",), "test_async_modes.py": ("realverl",), "test_layout_rules.py": ("realverl",),
    "test_migrate.py": ("realverl",), "test_memory_mcore_saves.py": ("realverl",), "test_memory_dynamic_batch.py": ("realverl",), "test_heldout_layouts.py": ("realverl",),
    "test_examiner_layouts.py": ("realverl",), "test_verlzygote.py": ("realverl",), "test_clean.py": ("ray",),
}
GROUPS = {
    "test_docker_real.py": "docker", "test_script_failures_docker.py": "docker",  # one dockerd per session
    "test_two_containers.py": "docker",
    "test_slurm.py": "slurm", "test_slurm_names.py": "slurm",  # slurmctld + slurmd of this host, one at a time
    "test_ray.py": "test_ray.py",  # its module-scoped Ray heads
}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    for item in items:
        name = item.path.name
        for tier in TIERS.get(name, ()):
            item.add_marker(getattr(pytest.mark, tier))
        group = "docker" if "docker_engine" in getattr(item, "fixturenames", ()) else GROUPS.get(name)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))
            if "docker_engine" in getattr(item, "fixturenames", ()):
                item.add_marker(pytest.mark.docker)
    items[:] = scheduling_order(items)


def scheduling_order(items: list) -> list:
    """The groups first (each goes to one worker whole), then the rest in file order. (test_compose.py and
    test_quoting.py were once spread among the rest: each of their scripts' clean-up slept 2 s, and all four workers
    waited at once. start_verl.sh's stop_ray no longer sleeps when its Ray is gone, and they take 0.3 s a test.)"""
    return sorted(items, key=lambda item: 0 if item.get_closest_marker("xdist_group") else 1)  # stable


class _TagProbe(pytest.Item):
    def runtest(self):
        pass


def _xdist_can_tag_groups():
    """pytest-xdist (3.8) puts a test in its group by assigning `item._nodeid`; that shows in `item.nodeid` only
    where pytest keeps the id there (not in pytest 9.2, where the group tags vanish without a word)."""
    probe = object.__new__(_TagProbe)
    probe._nodeid = "probe@group"
    try:
        return probe.nodeid == "probe@group"
    except AttributeError:
        return False


def pytest_configure(config):
    # without the tags, --dist loadgroup spreads a group's tests over the workers: two Slurm clusters and four
    # Ray heads at once on two cores, and the start-up timeouts that follow (CI of stop 41)
    if getattr(config.option, "dist", "no") == "loadgroup" and not _xdist_can_tag_groups():
        raise pytest.UsageError(
            f"pytest {pytest.__version__} drops pytest-xdist's group tags, so --dist loadgroup would run each group's "
            "tests at once: install the pytest the test extra pins (pip install '.[test]')")
    if not hasattr(config, "workerinput"):  # the controller: one set of warm verl servers for the session
        _start_warm_verl()


def _start_warm_verl():
    """Let the real-verl processes of every worker share warm interpreters (tests/verlzygote.py)."""
    if os.environ.get("VERL_DEPLOY_TESTS_COLD_VERL") == "1" or os.environ.get(verlzygote.DIR_VAR):
        return
    directory = tempfile.mkdtemp(prefix="verl-zygotes-")
    os.environ[verlzygote.DIR_VAR] = directory
    os.environ[verlzygote.OWNER_VAR] = str(os.getpid())
    os.environ[verlzygote.CLIENT_VAR] = str(Path(verlzygote.__file__).resolve())


def pytest_unconfigure(config):
    directory = os.environ.get(verlzygote.DIR_VAR)
    if not hasattr(config, "workerinput") and directory and os.environ.get(verlzygote.OWNER_VAR) == str(os.getpid()):
        verlzygote.stop_servers(directory)
        shutil.rmtree(directory, ignore_errors=True)

# Ray's `ray start` waits a fixed 30 s (not configurable in Ray 2.x: node.py's raylet_start_wait_time_s)
# for its raylet and agents to register; with 4 workers on 2 cores importing verl, a node started here
# once missed it three times in a row. A cluster node owns its CPUs; here the modules that start Ray or
# Slurm nodes get them back: their processes (and every process they start) run at nice -10 while the
# module runs. Only root may lower a nice value; elsewhere nothing changes.
NODE_TIERS = ("ray", "slurm")
BOOSTED_NICE = -10


@pytest.fixture(scope="module", autouse=True)
def _nodes_run_first(request):
    if not any(tier in NODE_TIERS for tier in TIERS.get(request.path.name, ())) or os.geteuid() != 0:
        yield
        return
    before = os.getpriority(os.PRIO_PROCESS, 0)
    os.setpriority(os.PRIO_PROCESS, 0, BOOSTED_NICE)
    try:
        yield
    finally:
        os.setpriority(os.PRIO_PROCESS, 0, before)
