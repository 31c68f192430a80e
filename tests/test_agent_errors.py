"""Say what really failed: the environment is named as the environment, with a fix for it, never the config.

A SwanLab host refusing connections, a package missing where the training runs, a verl that does not
import, the Docker daemon down, the start script's fix when --run-dir already is a verl checkout, and a
failed run whose log names nothing known still has a class.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import VERL_BIN, run_cli, run_scripts
from test_agent_path import agent, closed_port, install_entry

STANDIN = Path(__file__).parent / "standin_trainer.py"


def test_a_swanlab_host_refusing_connections_is_named_as_that_by_swanlab_login(tmp_path):
    """The real swanlab package logs in against a loopback port nobody listens on."""
    pytest.importorskip("swanlab", reason="the real swanlab package is needed for its login")
    env = {"SWANLAB_API_KEY": "sk-refused-0123456789", "HOME": str(tmp_path), "SWANLAB_SAVE_DIR": str(tmp_path / "sw"),
           "PATH": f"{Path(os.sys.executable).parent}:/usr/bin:/bin"}
    host = f"http://127.0.0.1:{closed_port()}"
    result = run_cli("swanlab", "login", "--swanlab-host", host, env=env)
    said = " ".join(result.stderr.split())
    assert result.returncode == 1 and f"the SwanLab host {host} refuses connections" in said, said
    assert "--swanlab-mode local" in said and "swanlab sync" in said
    assert "Cannot prompt" not in said and "sk-refused" not in said


def test_the_training_dying_at_a_missing_module_is_an_environment_failure_with_its_fix(npu_host, tmp_path):
    from test_launch import fake_torch_npu

    verl = tmp_path / "verl"
    # imports fine (the entry check passes); the training itself needs a package this python3 lacks
    install_entry(verl, STANDIN.read_text().replace('if __name__ == "__main__":\n',
                                                    'if __name__ == "__main__":\n    import verl_deploy_no_such_pkg\n', 1))
    env = dict(npu_host["env"], PYTHONPATH=str(fake_torch_npu(tmp_path)))
    code, run = agent(env, "launch", "--search-root", str(npu_host["root"]), "--run-dir", str(verl), "--ckpts-dir",
                      str(tmp_path / "ckpts"), "--train-steps", "4", "--backend", "local", "--yes", "--json")
    assert code == 0, run
    deadline = time.monotonic() + 90
    while True:
        _, status = agent(env, "status", run["id"], "--json")
        if status["state"] in ("succeeded", "failed") or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert status["state"] == "failed" and status["failure"]["class"] == "missing_python_package", status["failure"]
    assert "not a fault in the run's configuration" in status["failure"]["cause"]
    assert "pip install" in status["failure"]["fix"]
    assert any("verl_deploy_no_such_pkg" in line["text"] for line in status["failure"]["lines"])
    code, diagnosed = agent(env, "diagnose", status["log"], "--json")
    assert diagnosed["class"] == "missing_python_package"


RAY_FIXTURES = Path(__file__).parent / "fixtures" / "ray"


@pytest.mark.parametrize("printed_first", [False, True])
def test_a_failed_run_whose_log_names_nothing_known_still_has_a_class(npu_host, tmp_path, printed_first):
    """With `printed_first`, the log also holds Ray's NPU-probe warning and a `ray start` failure followed by a
    hand-over line (a line the scripts survived): neither names what ended the run, so the class stays
    unknown_failure and its cause says what the log showed."""
    from test_launch import fake_torch_npu

    verl = tmp_path / "verl"
    lines = "".join((RAY_FIXTURES / name).read_text() for name in ("start-head-npu-without-acl.log",
                                                                   "start-retried-then-handed-over.log"))
    say = f"print({lines!r}, flush=True); " if printed_first else ""
    install_entry(verl, STANDIN.read_text().replace('if __name__ == "__main__":\n',
                                                    f'if __name__ == "__main__":\n    {say}print("bye", flush=True); '
                                                    'sys.exit(3)\n', 1).replace("import os\n", "import os\nimport sys\n", 1))
    env = dict(npu_host["env"], PYTHONPATH=str(fake_torch_npu(tmp_path)))
    code, run = agent(env, "launch", "--search-root", str(npu_host["root"]), "--run-dir", str(verl), "--ckpts-dir",
                      str(tmp_path / "ckpts"), "--train-steps", "4", "--backend", "local", "--yes", "--json")
    assert code == 0, run
    deadline = time.monotonic() + 90
    while True:
        _, status = agent(env, "status", run["id"], "--json")
        if status["state"] in ("succeeded", "failed") or time.monotonic() > deadline:
            break
        time.sleep(0.3)
    assert status["state"] == "failed" and status["failure"]["class"] == "unknown_failure", status["failure"]
    assert "status 3" in status["failure"]["cause"] and f"verl-deploy logs {run['id']} --errors" in status["failure"]["fix"]
    if printed_first:
        assert "it shows only ray_cluster_startup (lines the scripts survived" in status["failure"]["cause"]
        assert "Failed to connect to GCS" in status["failure"]["lines"][0]["text"]
        assert status["failure"]["decision"] == status["failure"]["cause"]  # not Ray's start-up advice


def test_a_verl_that_does_not_import_is_the_environment_never_the_config():
    from verl_deploy.pipeline import prepare
    from verl_deploy.verify import VerifyResult, findings_for

    plan = prepare(flags={}).plan
    assert plan is not None
    result = VerifyResult("host", "failed", "0.7.0", steps=[
        {"step": "compose", "ok": True},
        {"step": "validate_config", "ok": False, "error": "ModuleNotFoundError", "message": "No module named 'verl.utils'"},
        {"step": "import_entry", "ok": False, "error": "ModuleNotFoundError", "message": "No module named 'ray'"}])
    found = findings_for(result, plan, required=False)
    assert not any("rejects the config" in f.message for f in found), found
    verl, entry = (next(f for f in found if f.field == name) for name in ("verl", "entry"))
    assert verl.area == "environment" and "not the run's config" in verl.message and "install verl" in verl.fix
    assert entry.area == "environment" and "pip install ray" in entry.fix


def test_the_docker_daemon_down_says_start_docker(tmp_path):
    """The real docker client against a socket nobody listens on."""
    if shutil.which("docker") is None:
        pytest.skip("no docker client on this machine")
    env = {"DOCKER_HOST": f"unix://{tmp_path}/nobody.sock", "PATH": f"{Path(os.sys.executable).parent}:/usr/bin:/bin"}
    code, plan = agent(env, "plan", "--verify", "--container", "verl-npu", "--json")
    docker = [f for f in plan["findings"] if f["field"] == "docker"]
    assert code == 1 and docker and docker[0]["area"] == "environment", plan["findings"]
    assert docker[0]["fix"].startswith("start Docker") and "--no-verify" in docker[0]["fix"]
    assert "plan --verify --json" not in docker[0]["fix"]


def test_the_start_scripts_fix_knows_the_run_dir_is_already_a_checkout(tmp_path, stubs):
    out = tmp_path / "out"
    made = run_cli("generate", "--output-dir", str(out), "--run-dir", str(stubs["verl_root"]), "--verl-version", "0.9.1",
                   "--dapo-source", "recipe")
    assert made.returncode == 0, made.stderr
    ran = run_scripts(out, stubs, {"STUB_IMPORT_ERROR": "ModuleNotFoundError: No module named 'ray'"})
    fixes = [line for line in ran.stderr.splitlines() if line.startswith("[start_verl] fix:")]
    assert ran.returncode == 2 and len(fixes) == 1, ran.stderr
    assert "has the entry file" in fixes[0] and "pip install ray" in fixes[0] and "as --run-dir" not in fixes[0]
    names = run_scripts(out, stubs, {"STUB_IMPORT_ERROR": "ImportError: cannot import name 'TaskRunner' from 'verl.x'"})
    assert "has the entry file" not in names.stderr  # a recipe of another verl: the checkout's own fix
    (stubs["verl_root"] / "recipe" / "dapo" / "main_dapo.py").unlink()  # a tree without the recipe: the checkout fix
    again = run_scripts(out, stubs, {"STUB_IMPORT_ERROR": "ModuleNotFoundError: No module named 'recipe'"})
    assert "has the entry file" not in again.stderr and "[start_verl] fix:" in again.stderr
