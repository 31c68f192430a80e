"""The agent's path through the skill, on the stand-in host: `--json` only, no terminal, every stdout one document.

One pre-launch command lists every blocker at once (host check, rules, SwanLab, the entry import); once
they are fixed one `launch` starts; the stand-in trainer runs out of device memory and the automatic
retries show in `status --json` (notices, each attempt's full feature set and exit code).
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path

from conftest import VERL_BIN, child_env

STANDIN = Path(__file__).parent / "standin_trainer.py"


def closed_port() -> int:
    """A loopback port nothing listens on (bound, then released): connections to it are refused."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def agent(env: dict, *args: str, timeout: float = 240) -> tuple[int, dict]:
    """Run verl-deploy as an agent does: no terminal (stdin closed), --json; stdout must be one JSON document."""
    done = subprocess.run([*VERL_BIN, *args], capture_output=True, text=True, stdin=subprocess.DEVNULL,
                          env=child_env({**os.environ, **env}), timeout=timeout)
    try:
        document = json.loads(done.stdout)
    except ValueError as exc:
        raise AssertionError(f"`verl-deploy {' '.join(args)}` stdout is not one JSON document ({exc}):\n"
                             f"{done.stdout[:2000]}\nstderr:\n{done.stderr[-2000:]}") from None
    assert isinstance(document, dict), document
    return done.returncode, document


def install_entry(verl: Path, text: str) -> None:
    for module in ("recipe/dapo/main_dapo.py", "recipe/one_step_off_policy/main_ppo.py"):
        (verl / module).parent.mkdir(parents=True, exist_ok=True)
        (verl / module).write_text(text)


def test_an_agent_fixes_every_blocker_from_one_listing_then_one_launch_runs_and_recovers(npu_host, tmp_path):
    from test_launch import fake_torch_npu

    verl = tmp_path / "verl"
    install_entry(verl, "import verl_deploy_test_missing_module  # like a host without ray\n" + STANDIN.read_text())
    env = dict(npu_host["env"], STANDIN_STEP_SECONDS="0.1", PYTHONPATH=str(fake_torch_npu(tmp_path)),
               SWANLAB_API_KEY="sk-agent-test-key-0123456789", STANDIN_FAIL="device_oom", STANDIN_FAIL_STEP="3")
    base = ["--search-root", str(npu_host["root"]), "--run-dir", str(verl), "--ckpts-dir", str(tmp_path / "ckpts"),
            "--train-steps", "8", "--save-freq", "2"]
    refused = f"http://127.0.0.1:{closed_port()}"
    broken = [*base, "--train-tp", "3", "--devices", "0-8", "--swanlab", "yes", "--swanlab-host", refused]

    # 1. one command lists every blocker at once
    code, found = agent(env, "launch", *broken, "--backend", "local", "--dry-run", "--json")
    assert code == 1 and found["ok"] is False and found["dry_run"] is True
    blockers = found["blockers"]
    fields = {b["field"] for b in blockers}
    assert all(set(b) >= {"level", "field", "message", "fix"} and b["fix"] for b in blockers), blockers
    assert any(b["area"] == "swanlab" and "refuses connections" in b["message"] and "--swanlab-mode local" in b["fix"]
               for b in blockers), blockers
    assert "entry" in fields and any("verl_deploy_test_missing_module" in b["message"] and b["area"] == "environment"
                                     and "install" in b["fix"] for b in blockers), blockers
    assert any("train_tp" in b["field"] or "tensor" in b["message"] for b in blockers), blockers  # a rule
    assert any(b["area"] == "accelerators" for b in blockers), blockers  # the host check, with the run's own --devices
    assert not any("Cannot prompt" in b["message"] for b in blockers)
    # plan --check is the same pass
    code, same = agent(env, "plan", *broken, "--check", "--json")
    assert code == 1 and {b["field"] for b in same["blockers"]} == fields
    # launch itself refuses with the same list, as one document, and starts nothing
    code, launch_refused = agent(env, "launch", *broken, "--backend", "local", "--yes", "--json")
    assert code == 1 and launch_refused["ok"] is False
    assert {b["field"] for b in launch_refused["blockers"]} == fields
    assert not any("see above" in json.dumps(f) for f in launch_refused["findings"])
    code, runs = agent(env, "runs", "--json")
    assert code == 0 and runs["runs"] == []

    # 2. fixed as the findings say: the rules' values, the devices, SwanLab local, the entry's environment
    install_entry(verl, STANDIN.read_text())
    fixed = [*base, "--swanlab", "yes", "--swanlab-host", refused, "--swanlab-mode", "local"]
    code, ready = agent(env, "launch", *fixed, "--backend", "local", "--dry-run", "--json")
    assert code == 0 and ready["ok"] is True and ready["blockers"] == [], ready["blockers"]
    # without a terminal and without --yes: one document saying so, exit 2
    code, unconfirmed = agent(env, "launch", *fixed, "--backend", "local", "--json")
    assert code == 2 and unconfirmed["ok"] is False and unconfirmed["findings"][0]["field"] == "confirmation"

    # 3. one launch starts
    code, started = agent(env, "launch", *fixed, "--backend", "local", "--yes", "--json")
    assert code == 0 and started["state"] in ("running", "succeeded"), started
    run_id = started["id"]

    # 4. the OOM retries show in status --json
    deadline = time.monotonic() + 120
    while True:
        code, status = agent(env, "status", run_id, "--json")
        assert code == 0
        if status["state"] in ("succeeded", "failed", "stopped") or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert status["state"] == "succeeded", json.dumps(status)[:3000]
    attempts = status["attempts"]
    assert [a["features"] for a in attempts] == [[], ["offload"], ["recompute"]]
    assert "offload" in attempts[1]["features_on"] and {"offload", "recompute"} <= set(attempts[2]["features_on"])
    for attempt in attempts[:2]:  # the trainer's own exit status: it exits on the OOM within control.ACT_NOW_GRACE
        assert attempt["exit_code"] == 1 and attempt["exit_seen"] is None, attempts
        assert attempt["failure"]["class"] == "device_oom", attempt["failure"]
    recoveries = [n for n in status["notices"] if n.get("kind") == "recovery"]
    assert len(recoveries) == 2 and "offload" in recoveries[0]["title"], status["notices"]
    assert status["failure"] is None


def test_the_end_of_a_failed_run_names_the_rung_not_tried_and_resume_continues_the_record(npu_host, tmp_path):
    from test_launch import fake_torch_npu

    verl = tmp_path / "verl"
    install_entry(verl, STANDIN.read_text())
    env = dict(npu_host["env"], STANDIN_STEP_SECONDS="0.1", PYTHONPATH=str(fake_torch_npu(tmp_path)),
               STANDIN_FAIL="device_oom", STANDIN_FAIL_STEP="3", MAX_OOM_RETRIES="1")
    done = subprocess.run([*VERL_BIN, "launch", "--search-root", str(npu_host["root"]), "--run-dir", str(verl),
                           "--ckpts-dir", str(tmp_path / "ckpts"), "--train-steps", "8", "--save-freq", "2",
                           "--backend", "local", "--yes", "--follow"], capture_output=True, text=True,
                          stdin=subprocess.DEVNULL, env=child_env({**os.environ, **env}), timeout=240)
    assert done.returncode == 1, done.stderr[-2000:]
    lines = done.stdout.splitlines()
    end = lines[lines.index(next(line for line in lines if line.startswith("next: "))) - 2:]
    assert end[0].startswith("run ") and " failed: device_oom: " in end[0], done.stdout[-2000:]
    assert end[1].startswith("evidence: line ") and "NPU out of memory" in end[1]
    assert end[2].startswith("next: add recompute, the next rung of the OOM ladder (not tried yet)")
    run_id = end[0].split()[1]
    assert end[3].strip() == f"verl-deploy resume {run_id} --features recompute"
    assert "larger TP/PP" not in end[2]
    code, status = agent(env, "status", run_id, "--json")
    assert status["end"]["command"] == end[3].strip() and status["failure"]["next"]["command"] == end[3].strip()

    # the command as printed: same record, a new attempt from the newest complete checkpoint, then success
    code, resumed = agent(env, *end[3].split()[1:], "--yes", "--follow", "--json")
    assert code == 0 and resumed["state"] == "succeeded" and resumed["id"] == run_id, resumed
    attempts = resumed["attempts"]
    assert len(attempts) == 3 and attempts[2]["reason"].startswith("resumed by `verl-deploy resume`")
    assert attempts[2]["resumed_from_step"] == 4 and {"offload", "recompute"} <= set(attempts[2]["features_on"])
    assert attempts[2]["feature_origins"]["recompute"] == "user"
    assert resumed["end"]["command"] == f"verl-deploy report {run_id}"
    code, again = agent(env, "resume", run_id, "--yes", "--json")
    assert code == 1 and again["findings"][0]["field"] == "run" and "already succeeded" in again["findings"][0]["message"]

    # the OOMs went to the calibration log: the next launch of this model starts with the features, and says why
    env.pop("STANDIN_FAIL")
    code, again = agent(env, "launch", "--search-root", str(npu_host["root"]), "--run-dir", str(verl), "--ckpts-dir",
                        str(tmp_path / "ckpts2"), "--train-steps", "2", "--save-freq", "2", "--backend", "local",
                        "--yes", "--json")
    assert code == 0, again
    origins = again["attempts"][0]["feature_origins"]
    assert "calibration" in origins.values(), origins
    assert "estimate" not in origins.values()
