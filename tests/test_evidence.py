"""Stall evidence: a stand-in run that hangs inside a named Python function yields stack dumps naming it.

Real processes and a real py-spy (`--nonblocking`: it reads the process without stopping it). py-spy
needs ptrace on the target: root has it; elsewhere the test skips and says why.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest

from conftest import run_cli
from test_launch import launch as launch_with_check, status, trainer  # noqa: F401  (trainer is a fixture)

pytestmark = [
    pytest.mark.skipif(shutil.which("py-spy") is None, reason="py-spy is not installed (pip install py-spy)"),
    pytest.mark.skipif(os.geteuid() != 0, reason="py-spy needs ptrace on the trainer: only root has it on this machine"),
]


def launch(trainer, *extra, env=None):
    return launch_with_check(trainer, "--skip-check", *extra, env=env)  # the host check is not under test here


def wait_notice(record_path: Path, timeout: float = 120) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        notices = json.loads(record_path.read_text())["notices"]
        if notices:
            return notices[0]
        time.sleep(0.3)
    raise AssertionError("no notice")


def test_a_stall_collects_stack_dumps_that_name_where_the_trainer_waits(trainer):
    run = json.loads(launch(trainer, "--json", "--stall-minutes", "0.03",
                            env={"STANDIN_FAIL": "hang", "STANDIN_FAIL_STEP": "3"}).stdout)
    notice = wait_notice(Path(run["directory"]) / "run.json")
    folder = Path(notice["evidence"])
    assert notice["title"].startswith("stalled") and f"evidence in {folder}" in notice["body"]
    assert folder.parent == Path(run["directory"]) / "evidence"
    summary = json.loads((folder / "summary.json").read_text())
    dumped = [s for s in summary["stacks"] if s["file"]]
    assert dumped, summary
    stacks = "".join(Path(s["file"]).read_text() for s in dumped)
    assert "wait_for_stuck_allreduce" in stacks and "main_dapo.py" in stacks
    assert "Training Progress" in (folder / "logs" / "attempt-1.log").read_text()
    assert "910B3" in (folder / "devices.txt").read_text()
    assert summary["seconds"] < 60
    assert status(trainer, run["id"])["state"] == "running"  # the evidence did not stop the training
    pid = json.loads((Path(run["directory"]) / "run.json").read_text())["attempts"][0]["handle"]["pid"]
    os.kill(pid, 0)  # still there

    on_demand = run_cli("evidence", run["id"], "--json", env=trainer["env"])
    again = json.loads(on_demand.stdout)
    assert on_demand.returncode == 0 and Path(again["folder"]) != folder
    assert any("wait_for_stuck_allreduce" in Path(s["file"]).read_text() for s in again["stacks"] if s["file"])
    assert run_cli("stop", run["id"], env=trainer["env"]).returncode == 0


def test_evidence_of_an_unknown_run_is_one_line(trainer):
    result = run_cli("evidence", "nope", env=trainer["env"])
    assert result.returncode == 1 and "no run 'nope'" in result.stderr and "Traceback" not in result.stderr


def _fake_ray(tmp_path, pending_calls: int) -> dict:
    """A `ray` whose `status` answers as Ray does before its monitor reports (the first PENDING_CALLS times)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    counter = tmp_path / "calls"
    script = bin_dir / "ray"
    script.write_text(f"""#!/bin/sh
n=$(cat {counter} 2>/dev/null || echo 0); n=$((n + 1)); echo $n > {counter}
if [ $n -le {pending_calls} ]; then
  echo "No cluster status. It may take a few seconds for the Ray internal services to start up."
else
  printf '======== Autoscaler status ========\\nNode status\\n---\\nActive:\\n 1 node_abc\\n'
fi
""")
    script.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_ray_status_is_asked_again_until_a_fresh_head_has_a_status(tmp_path):
    """CI once saw a run at step 2 whose evidence held only Ray's "No cluster status" (its monitor lagged on a
    loaded host): evidence asks again every few seconds and keeps the first real status."""
    from verl_deploy.runs.evidence import settled_ray_status

    output = settled_ray_status("127.0.0.1:1", _fake_ray(tmp_path, pending_calls=2), settle_s=5, every_s=0.1)
    assert "Node status" in output and "1 node_abc" in output
    assert (tmp_path / "calls").read_text().strip() == "3"


def test_ray_status_that_never_settles_is_kept_as_ray_said_it_within_the_bound(tmp_path):
    from verl_deploy.runs.evidence import settled_ray_status

    started = time.monotonic()
    output = settled_ray_status("127.0.0.1:1", _fake_ray(tmp_path, pending_calls=10**6), settle_s=0.5, every_s=0.1)
    assert output.startswith("No cluster status") and time.monotonic() - started < 5
    assert 2 <= int((tmp_path / "calls").read_text()) <= 7
