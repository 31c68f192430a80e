"""Log lines written to hurt: the live supervisor, `status`, `logs`, `diagnose` and `report` survive them.

The stand-in trainer (tests/standin_trainer.py) writes the hostile bytes into its real log
(STANDIN_LINES_FILE) in a live run; nothing here is faked but the accelerator.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from conftest import run_cli, webhook_server
from test_launch import launch, status, trainer, wait_for  # noqa: F401  (trainer is a fixture)

DONE = ("succeeded", "failed", "stopped")
DIGITS = "9" * 5000
HOSTILE = [
    f"(TaskRunner pid=1) step:{DIGITS} - critic/score/mean:0.5",
    f"(TaskRunner pid=1) Training Progress:  10%|#| 1/{DIGITS} [00:01<00:09, 1.00s/it]",
    f"(TaskRunner pid=1) Training Progress:  10%|#| 1/8 [00:01<00:09, 1.2.3s/it]",
    f"(TaskRunner pid=1) local_global_step_folder: /ckpts/global_step_{DIGITS}",
    f"(TaskRunner pid=1) Total training steps: {DIGITS}",
    f"(TaskRunner pid=1) Setting global step to {DIGITS}",
    f"(TaskRunner pid=1) step:1 - timing_s/step:1e308 - critic/score/mean:{DIGITS}.5 - perf/throughput:nan",
    "(WorkerDict pid=2) RuntimeError: NPU out of memory. Tried to allocate 1.2.3 GiB (1e999 GiB total capacity) warning",
    "(TaskRunner pid=1) \x1b]0;owned title\x07 \x1b]52;c;ZWNobyBwd25lZA==\x07 \x1b[2J\x1b[31mred\x1b[0m swanlab: View run at "
    "https://swanlab.cn/@x/\x1b]8;;http://evil\x07runs/1",
]
RAW_BYTES = b"\xff\xfe\x00\x9b31m not utf-8 \xc3\x28\n" + b"A" * (5 << 20) + b"\n"  # and a 5 MiB line


def hostile_file(tmp: Path) -> Path:
    path = tmp / "hostile.txt"
    path.write_bytes(("\n".join(HOSTILE) + "\n").encode() + RAW_BYTES)
    return path


def no_traceback(result) -> None:
    assert "Traceback" not in result.stdout + result.stderr, (result.stdout + result.stderr)[-3000:]


def no_control(text: str) -> None:
    bad = [c for c in text if (ord(c) < 32 and c not in "\n\t") or 0x7f <= ord(c) < 0xa0]
    assert not bad, f"raw control characters reach the terminal: {sorted(set(map(hex, map(ord, bad))))}"


def test_hostile_lines_in_a_live_run_are_skipped_and_counted_and_the_oom_after_them_still_retries(trainer):
    lines = hostile_file(trainer["host"]["tmp"])
    result = launch(trainer, "--follow", "--json", env={"STANDIN_LINES_FILE": str(lines), "STANDIN_LINES_STEP": "2",
                                                        "STANDIN_FAIL": "device_oom", "STANDIN_FAIL_STEP": "3"})
    no_traceback(result)
    final = json.loads(result.stdout)
    assert final["state"] == "succeeded", result.stderr[-3000:]
    first, second = final["attempts"][:2]
    assert first["failure"]["class"] == "device_oom" and second["features"], final["attempts"]  # the OOM still retried
    assert final["step"] == 8 and final["total_steps"] == 8 and final["supervisor_deaths"] == []
    skipped = final["unreadable_lines"]
    assert skipped["count"] >= 5 and "at most 18 digits" in skipped["first"]["why"], skipped  # the 5,000-digit lines
    assert final["eta_seconds"] is None or final["eta_seconds"] < 1e6
    log = first["log"]
    assert DIGITS in Path(log).read_text(errors="replace")  # the run really wrote them
    for command in (["status", final["id"]], ["logs", final["id"], "--attempt", "1"], ["diagnose", log],
                    ["diagnose", log, "--json"], ["report", final["id"], "--output", str(trainer["host"]["tmp"] / "r")]):
        shown = run_cli(*command, env=trainer["env"])
        no_traceback(shown)
        no_control(shown.stdout + shown.stderr)
        assert shown.returncode in (0, 1), (command, shown.stderr[-2000:])
    human = " ".join(run_cli("status", final["id"], env=trainer["env"]).stdout.split())
    assert f"{skipped['count']} log line(s) could not be read" in human
    raw = run_cli("logs", final["id"], "--attempt", "1", "--raw", env=trainer["env"])
    assert "\x1b]0;owned title\x07" in raw.stdout  # asked for raw: as written
    shown = run_cli("logs", final["id"], "--attempt", "1", env=trainer["env"]).stdout
    assert "owned title" in shown and "\x1b" not in shown  # neutralised, still readable
    verdict = json.loads(run_cli("diagnose", log, "--json", env=trainer["env"]).stdout)
    assert verdict["class"] == "device_oom" and verdict["lines_skipped"] >= 1


def _hook():
    return webhook_server()


def _record(run: dict) -> dict:
    return json.loads((Path(run["directory"]) / "run.json").read_text())


def _wait_record(run: dict, predicate, timeout: float = 30) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            data = _record(run)
            if predicate(data):
                return data
        except (OSError, ValueError):
            pass
        time.sleep(0.1)
    raise AssertionError(f"record never matched: {_record(run)}")


def test_a_supervisor_that_dies_is_recorded_noticed_and_replaced(trainer):
    server, received, url = _hook()
    try:
        run = json.loads(launch(trainer, "--json", "--notify", url, env={"STANDIN_STEP_SECONDS": "3"}).stdout)
        wait_for(trainer, run["id"], lambda d: d["step"] >= 1)
        first = _record(run)["supervisor_pid"]
        os.kill(first, signal.SIGTERM)  # terminated: it records its own death
        died = _wait_record(run, lambda d: d["state"] == "supervisor_died")
        assert died["supervisor_deaths"][-1]["error"] == "killed by SIGTERM"
        assert any("supervisor died" in r["message"] and run["id"] in r["message"] for r in received), received
        human = run_cli("status", run["id"], env=trainer["env"])  # shows the death, and starts a new supervisor
        assert "supervisor died" in " ".join(human.stdout.split()) and "killed by SIGTERM" in human.stdout
        second = _wait_record(run, lambda d: d["state"] == "running" and d["supervisor_pid"] != first)["supervisor_pid"]
        os.kill(second, signal.SIGKILL)  # no word from it: the next status notices
        time.sleep(0.3)
        data = status(trainer, run["id"])
        deaths = data["supervisor_deaths"]
        assert len(deaths) == 2 and f"pid {second}" in deaths[-1]["error"], deaths
        assert sum("supervisor died" in r["message"] for r in received) == 2
        final = wait_for(trainer, run["id"], lambda d: d["state"] in DONE)
        assert final["state"] == "succeeded" and final["step"] == 8
    finally:
        server.shutdown()


def test_a_restarted_supervisor_resumes_past_the_line_its_predecessor_died_on(trainer):
    """As a supervisor that died reading a line leaves the record: the next one skips that line, counted."""
    run = json.loads(launch(trainer, "--json", env={"STANDIN_STEP_SECONDS": "1.2"}).stdout)
    wait_for(trainer, run["id"], lambda d: d["step"] >= 2)
    record = _record(run)
    os.kill(record["supervisor_pid"], signal.SIGKILL)
    time.sleep(0.3)
    record = _record(run)
    log = Path(record["attempts"][0]["log"]).read_bytes()
    at = log.index(b"step:2 - ")
    at = log.rindex(b"\n", 0, at) + 1
    record["scan"] = {}  # read again from the start
    record["state"] = "supervisor_died"
    record["supervisor_deaths"] = [{"time": time.time(), "error": "ValueError: stand-in", "attempt": 1, "offset": at}]
    (Path(run["directory"]) / "run.json").write_text(json.dumps(record))
    final = wait_for(trainer, run["id"], lambda d: d["state"] in DONE)
    assert final["state"] == "succeeded" and final["step"] == 8
    assert final["unreadable_lines"]["count"] == 1
    assert "previous supervisor died reading this line" in final["unreadable_lines"]["first"]["why"]


def test_a_supervisor_that_died_three_times_at_the_same_place_is_not_restarted(tmp_path):
    from verl_deploy.runs.record import Attempt, RunRecord

    log = tmp_path / "state" / "runs" / "20260101-000000-dead" / "train.log"  # a record's paths stay in its run
    log.parent.mkdir(parents=True)
    log.write_text("step:1 - critic/score/mean:0.1\n")
    death = {"time": 1.0, "error": "ValueError: the same line", "attempt": 1, "offset": 0}
    env = {"VERL_DEPLOY_STATE_DIR": str(tmp_path / "state")}
    saved = os.environ.get("VERL_DEPLOY_STATE_DIR")
    os.environ.update(env)
    try:
        RunRecord(id="20260101-000000-dead", backend="local", spec={}, state="supervisor_died",
                  attempts=[Attempt(n=1, features=[], reason="launch", log=str(log))],
                  supervisor_deaths=[death] * 3).save()
    finally:
        os.environ.pop("VERL_DEPLOY_STATE_DIR") if saved is None else os.environ.update(VERL_DEPLOY_STATE_DIR=saved)
    data = json.loads(run_cli("status", "20260101", "--json", env=env).stdout)
    assert data["state"] == "supervisor_died" and len(data["supervisor_deaths"]) == 3
    human = run_cli("status", "20260101", env=env)
    assert "not restarted (it died the same way 3 times)" in " ".join(human.stdout.split()), human.stdout
    record = json.loads((tmp_path / "state" / "runs" / "20260101-000000-dead" / "run.json").read_text())
    assert record["supervisor_pid"] is None  # nothing was started


def test_two_status_at_once_start_one_supervisor(tmp_path, monkeypatch):
    """Two `status` (or `logs`) that find the supervisor gone at the same moment: one starts a supervisor, the other
    sees it. Without the run folder's lock both did, and two supervisors drove one run."""
    import subprocess
    import sys
    import threading

    from verl_deploy.runs import supervisor
    from verl_deploy.runs.record import Attempt, RunRecord

    monkeypatch.setenv("VERL_DEPLOY_STATE_DIR", str(tmp_path / "state"))
    run_id = "20260101-000000-twin"
    log = tmp_path / "state" / "runs" / run_id / "train.log"
    log.parent.mkdir(parents=True)
    log.write_text("step:1 - critic/score/mean:0.1\n")
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    RunRecord(id=run_id, backend="local", spec={}, state="running", supervisor_pid=gone.pid,
              attempts=[Attempt(n=1, features=[], reason="launch", log=str(log))]).save()
    started: list[subprocess.Popen] = []

    def spawn(run: str) -> int:  # a stand-in named as a supervisor, slow to come up as a real one is
        time.sleep(0.3)
        started.append(subprocess.Popen([sys.executable, "-c", "import time; time.sleep(20)", "_supervise", run]))
        return started[-1].pid

    monkeypatch.setattr(supervisor, "spawn_supervisor", spawn)
    record = RunRecord.load(run_id)
    both = [threading.Thread(target=supervisor.ensure_supervised, args=(record,)) for _ in range(2)]
    try:
        for thread in both:
            thread.start()
        for thread in both:
            thread.join(timeout=30)
        assert len(started) == 1
        assert RunRecord.load(run_id).supervisor_pid == started[0].pid
    finally:
        for process in started:
            process.kill()
            process.wait()


def test_status_waits_for_a_supervisor_that_recorded_its_death_to_exit_then_starts_a_new_one(tmp_path):
    """The supervisor writes its death as its last act and then shuts its interpreter down: a `status` in between
    saw it alive, started none and said it had. The stand-in is a process named as a supervisor, leaving in 2 s."""
    import subprocess
    import sys

    from verl_deploy.runs.record import Attempt, RunRecord

    run_id = "20260101-000000-exit"
    log = tmp_path / "state" / "runs" / run_id / "train.log"
    log.parent.mkdir(parents=True)
    log.write_text("step:1 - critic/score/mean:0.1\n")
    leaving = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(2)", "_supervise", run_id])
    env = {"VERL_DEPLOY_STATE_DIR": str(tmp_path / "state")}
    saved = os.environ.get("VERL_DEPLOY_STATE_DIR")
    os.environ.update(env)
    try:
        RunRecord(id=run_id, backend="local", spec={}, state="supervisor_died", supervisor_pid=leaving.pid,
                  attempts=[Attempt(n=1, features=[], reason="launch", log=str(log))],
                  supervisor_deaths=[{"time": 1.0, "error": "killed by SIGTERM", "attempt": 1, "offset": None,
                                      "pid": leaving.pid}]).save()
    finally:
        os.environ.pop("VERL_DEPLOY_STATE_DIR") if saved is None else os.environ.update(VERL_DEPLOY_STATE_DIR=saved)
    try:
        assert leaving.poll() is None  # still there when status looks
        human = run_cli("status", run_id, env=env)
        assert "started a new one" in " ".join(human.stdout.split()), human.stdout
        assert leaving.poll() is not None  # status waited for it
        record = json.loads((log.parent / "run.json").read_text())
        assert record["supervisor_pid"] not in (None, leaving.pid)  # and then started one
    finally:
        leaving.kill()
        leaving.wait()
