"""Hostile values in every string field never execute: the scripts pass `bash -n` and run down every
branch (success, import failure, missing entry file, missing run dir, nodes that never join) with stub
tools, and the marker file a `$(touch ...)` would create never appears.

Two ways in: through the CLI's own validation (every field that accepts the value gets it), and with the
validation bypassed (the spec copied without checks), which shows the renderer itself never pastes a
value raw: the quoting, not the validation, is what keeps the value inert.
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from verl_deploy.compiler import compile_plan
from verl_deploy.pipeline import prepare
from verl_deploy.render import UnquotedValue, _environment, plan_document, render_scripts, write_outputs
from verl_deploy.spec import RunSpec

from conftest import STUB_PYTHON, STUB_RAY

# $PWNED is the marker's path, set in the scripts' environment: any execution of these creates it
HOSTILE = ["$(touch $PWNED)", "`touch $PWNED`", 'a"b$(touch $PWNED)"c', "it's'$(touch $PWNED)'",
           "x;touch $PWNED;", "x\n$(touch $PWNED)\ntouch $PWNED\n#", "\\\"$(touch $PWNED)\\"]
STRING_FIELDS = [name for name, field in RunSpec.model_fields.items()
                 if field.annotation in (str, str | None) and name not in ("verl_version", "swanlab_api_key")]
ENTRY = "recipe/dapo/main_dapo.py"


def _tools(tmp: Path) -> dict:
    stubs = {"bin": tmp / "bin", "log": tmp / "log"}
    for d in stubs.values():
        d.mkdir()
    for name, text in (("python3", STUB_PYTHON), ("ray", STUB_RAY)):
        (stubs["bin"] / name).write_text(text)
        (stubs["bin"] / name).chmod(0o755)
    return stubs


def _verl_root(tmp: Path, hostile: str) -> Path:
    root = tmp / ("verl" + hostile.replace("/", "_"))  # a real directory with the hostile name
    (root / ENTRY).parent.mkdir(parents=True)
    (root / ENTRY).write_text("")
    return root


def _run(out: Path, stubs: dict, marker: Path, **env: str) -> subprocess.CompletedProcess:
    # the stub `ray` starts nothing: a given temp dir whose session link resolves nowhere spares the script's
    # exit trap its /proc scan for this run's Ray processes (seconds on a busy host)
    ray_temp = out / "ray-temp"
    ray_temp.mkdir(exist_ok=True)
    if not os.path.lexists(ray_temp / "session_latest"):
        os.symlink("session_latest", ray_temp / "session_latest")
    full = {"PATH": f"{stubs['bin']}:{os.environ['PATH']}", "STUB_LOG": str(stubs["log"]), "HOME": str(out),
            "PWNED": str(marker), "WAIT_FOR_NODES_SECONDS": "0", "RAY_START_ARGS": f"--temp-dir={ray_temp}", **env}
    return subprocess.run(["bash", str(out / "start_verl.sh")], capture_output=True, text=True, env=full,
                          timeout=120, cwd=out)


def _every_branch(out: Path, stubs: dict, root: Path, marker: Path, multi_node: bool) -> None:
    for name in ("start_verl.sh", "run_training.sh"):
        checked = subprocess.run(["bash", "-n", str(out / name)], capture_output=True, text=True)
        assert checked.returncode == 0, f"{name}: {checked.stderr}"
    shown = str(root)
    if multi_node:  # the head waits for nodes that never join: the error path naming the expected nodes
        waited = _run(out, stubs, marker)
        assert waited.returncode == 3 and "Expected: " in waited.stderr, waited.stderr
        assert not marker.exists()
        return
    ok = _run(out, stubs, marker)
    assert ok.returncode == 0, ok.stderr
    assert (stubs["log"] / "python3.cwd").read_text().rstrip("\n") == shown
    failed_import = _run(out, stubs, marker, STUB_IMPORT_ERROR="ModuleNotFoundError: No module named 'recipe'")
    assert failed_import.returncode == 2 and f"does not import from {shown}: " in failed_import.stderr
    (root / ENTRY).unlink()
    missing_entry = _run(out, stubs, marker)
    assert missing_entry.returncode == 2 and f"{ENTRY} is missing under {shown}: " in missing_entry.stderr
    (root / ENTRY).write_text("")
    moved = root.with_name(root.name + "-moved")
    root.rename(moved)
    no_dir = _run(out, stubs, marker)
    assert no_dir.returncode == 2 and f"does not import from {shown}" in no_dir.stderr
    unchecked = _run(out, stubs, marker, VERL_DEPLOY_SKIP_ENTRY_CHECK="1")  # run_training.sh's own cd fails
    assert unchecked.returncode != 0
    moved.rename(root)
    assert not marker.exists(), "a hostile value was executed"


def _accepted_flags(hostile: str, root: Path) -> dict:
    """Every string field that validation accepts this value in (alone), plus an override carrying it."""
    base = {"run_dir": str(root), "swanlab": True, "swanlab_mode": "local"}
    accepted: dict = {}
    for name in STRING_FIELDS:
        if name == "run_dir":
            continue
        value = ("/m/" + hostile) if name in ("model_path", "train_file", "test_file", "ckpts_dir",
                                              "swanlab_log_dir", "verl_dir") else hostile
        try:
            prepared = prepare(flags={**base, name: value}, environ={}, check_verl=False)
        except Exception:  # a refusal of the value (UserError): this field does not take it
            continue
        if prepared.ok:
            accepted[name] = value
    for override in (f"+trainer.hostile_note={hostile}", f"+trainer.hostile_note='{hostile}'"):
        try:
            prepared = prepare(flags={**base, "overrides": [override]}, environ={}, check_verl=False)
        except Exception:
            continue
        if prepared.ok:
            accepted["overrides"] = [override]
            break
    return {**base, **accepted}


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_values_accepted_by_validation_never_execute(tmp_path, hostile):
    stubs = _tools(tmp_path)
    root = _verl_root(tmp_path, hostile)
    marker = tmp_path / "pwned-marker"
    if "\n" in hostile:  # validation refuses a line break in any field, the run dir first: one line naming it
        from verl_deploy.findings import UserError

        with pytest.raises(UserError) as refused:
            prepare(flags={"run_dir": str(root)}, environ={}, check_verl=False)
        assert "run_dir" in str(refused.value) and "control character" in str(refused.value)
        return
    flags = _accepted_flags(hostile, root)
    prepared = prepare(flags=flags, environ={}, check_verl=False)
    assert prepared.ok, [f.line() for f in prepared.findings]
    out = tmp_path / "out"
    write_outputs(prepared.plan, out, plan_document(prepared.plan, [], None), force=False)
    _every_branch(out, stubs, root, marker, multi_node=False)


@pytest.mark.parametrize("hostile", HOSTILE)
def test_hostile_values_past_validation_are_still_only_quoted_text(tmp_path, hostile):
    """Validation bypassed: every string field and a node name hold the value; the scripts stay inert."""
    stubs = _tools(tmp_path)
    root = _verl_root(tmp_path, hostile)
    marker = tmp_path / "pwned-marker"
    prepared = prepare(flags={"run_dir": str(tmp_path), "swanlab": True, "swanlab_mode": "local"}, environ={},
                       check_verl=False)
    assert prepared.ok
    spec = prepared.plan.spec
    update = {name: hostile for name in STRING_FIELDS if getattr(spec, name, None) is not None or name in (
        "container", "socket_ifname", "http_proxy", "https_proxy", "swanlab_host")}
    update.update(run_dir=str(root), model_path="/m/" + hostile, train_file="/d/" + hostile,
                  test_file="/t/" + hostile, ckpts_dir="/c/" + hostile)
    for multi_node in (False, True):
        extra = {"nodes": ["h1", hostile], "nnodes": 2} if multi_node else {}
        unchecked = spec.model_copy(update={**update, **extra})
        plan = compile_plan(unchecked, prepared.plan.profile)
        out = tmp_path / f"out-{int(multi_node)}"
        out.mkdir()
        for name, text in render_scripts(plan).items():
            (out / name).write_text(text)
        _every_branch(out, stubs, root, marker, multi_node)


def test_a_template_value_without_the_quoting_filter_stops_the_render():
    env = _environment()
    with pytest.raises(UnquotedValue):
        env.from_string("echo {{ run_dir }}\n").render(run_dir="$(touch pwned)")
    with pytest.raises(UnquotedValue):  # building a string from a quoted part unquotes it again
        env.from_string("echo {{ 'x' ~ (run_dir | sh) }}\n").render(run_dir="a b")
    assert env.from_string("echo {{ run_dir | sh }} {{ n }}\n").render(run_dir="a b", n=2) == "echo 'a b' 2\n"


@pytest.mark.parametrize("hostile", HOSTILE)
def test_the_container_start_and_stop_commands_keep_a_hostile_run_dir_inert(tmp_path, hostile):
    """What `docker exec ... bash -c` runs in the container, run here with bash: the attempt folder (under the
    run dir, a user's value) is a real directory with the hostile name; the start runs its start_verl.sh and
    writes the pid file, the stop ends that group, and the marker never appears."""
    import signal
    import time

    from verl_deploy.backends.docker import end_group_in, start_command

    remote = tmp_path / ("run" + hostile.replace("/", "_")) / "verl-deploy-runs" / "r1" / "attempt-1"
    remote.mkdir(parents=True)
    (remote / "start_verl.sh").write_text("echo started > started.txt\nexec sleep 300\n")
    marker = tmp_path / "pwned-marker"
    env = {**os.environ, "PWNED": str(marker)}
    started = subprocess.Popen(["bash", "-c", start_command(str(remote))], env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 20
        started_txt = remote / "started.txt"
        # `echo started > started.txt` makes the file, then writes: wait for the line, not the file (CI read it empty)
        while not (started_txt.exists() and started_txt.read_text()) and time.monotonic() < deadline:
            time.sleep(0.05)
        leader = int((remote / "pid").read_text())
        assert (remote / "started.txt").read_text() == "started\n"
        subprocess.run(["bash", "-c", end_group_in(str(remote))], env=env, check=True, timeout=30)
        assert started.wait(timeout=10) != 0  # setsid -w reports its child's end by SIGTERM
        assert not Path(f"/proc/{leader}").exists() or Path(f"/proc/{leader}/stat").read_text().split()[2] == "Z"
    finally:
        if started.poll() is None:
            os.killpg(started.pid, signal.SIGKILL)
    assert not marker.exists(), "a hostile run dir was executed"


def test_the_container_stop_leaves_a_process_that_took_the_recorded_pid(tmp_path):
    from verl_deploy.backends.docker import end_group_in

    remote = tmp_path / "attempt-1"
    remote.mkdir()
    other = subprocess.Popen(["sleep", "300"], cwd=tmp_path, start_new_session=True)  # elsewhere, own group
    try:
        (remote / "pid").write_text(f"{other.pid}\n")
        subprocess.run(["bash", "-c", end_group_in(str(remote))], check=True, timeout=30)
        assert other.poll() is None
    finally:
        other.kill()
