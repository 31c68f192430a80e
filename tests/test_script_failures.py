"""verl-deploy's own scripts before the training: each early step that fails says so in one line, and the run's
cause names the script, its step, its exit status and what it printed, never the training.

submit.sbatch and start_verl.sh are rendered by `generate` and run with bash; `scontrol`, `srun`,
`python3` and `ray` are small stand-ins that record their calls (srun runs its command here, as node
0), `getent` is the system's own (`vdnode` does not resolve, `localhost` does). No Slurm is needed;
tests/test_slurm_names.py runs the same on a real Slurm.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import run_cli
from test_launch import launch, trainer  # noqa: F401  (the local backend with the stand-in trainer)
from verl_deploy.runs.outcome import script_failure
from verl_deploy.runs.record import Attempt, RunRecord
from verl_deploy.watch.handover import HANDOVER, read_failure

SCONTROL = """#!/usr/bin/env bash
printf '%s\\n' "$*" >> "$STUB_LOG/scontrol.calls"
if [ "$1 $2" = "show hostnames" ]; then
    if [ -n "${STUB_NODES_ERROR:-}" ]; then echo "scontrol: error: $STUB_NODES_ERROR" >&2; exit 1; fi
    printf '%s\\n' $STUB_NODES
elif [ "$1 $2 $3" = "show node -o" ]; then
    echo "NodeName=$4 Arch=x86_64 CoresPerSocket=1 CPUAlloc=0 NodeAddr=${STUB_NODE_ADDR:-$4} NodeHostName=$4 Version=22.05.8"
fi
"""
SRUN = """#!/usr/bin/env bash
printf '%s\\n' "$*" >> "$STUB_LOG/srun.calls"
if [ -n "${STUB_SRUN_ERROR:-}" ]; then echo "srun: error: $STUB_SRUN_ERROR" >&2; exit 1; fi
while [ "$#" -gt 0 ] && [ "$1" != bash ]; do shift; done
SLURM_NODEID=0 exec "$@"
"""
PYTHON = """#!/usr/bin/env bash
if [ "$1" = -c ]; then
    [ -z "${STUB_IMPORT_ERROR:-}" ] || { echo "$STUB_IMPORT_ERROR" >&2; exit 1; }
    exit 0
fi
env > "$STUB_LOG/python3.env"
echo "trainer: started"
exit "${STUB_EXIT:-0}"
"""
RAY = """#!/usr/bin/env bash
printf '%s\\n' "$*" >> "$STUB_LOG/ray.calls"
if [ "$1" = start ] && [ -n "${STUB_RAY_START_ERROR:-}" ]; then echo "$STUB_RAY_START_ERROR" >&2; exit 1; fi
[ "$1" != status ]
"""


@pytest.fixture()
def job(tmp_path):
    """`generate --scheduler slurm` into a folder, stand-in tools on PATH, and a way to run submit.sbatch."""
    bin_dir, log, verl = tmp_path / "bin", tmp_path / "log", tmp_path / "verl"
    for folder in (bin_dir, log, verl / "recipe" / "dapo"):
        folder.mkdir(parents=True)
    (verl / "recipe" / "dapo" / "main_dapo.py").write_text("")
    for name, text in (("scontrol", SCONTROL), ("srun", SRUN), ("python3", PYTHON), ("ray", RAY)):
        (bin_dir / name).write_text(text)
        (bin_dir / name).chmod(0o755)

    def generate(*extra: str) -> Path:
        out = tmp_path / f"out{len(list(tmp_path.glob('out*')))}"
        made = run_cli("generate", "--output-dir", str(out), "--scheduler", "slurm", "--run-dir", str(verl), *extra)
        assert made.returncode == 0, made.stderr
        return out

    def run(out: Path, script: str = "submit.sbatch", **env: str) -> subprocess.CompletedProcess:
        full = {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(tmp_path), "STUB_LOG": str(log),
                "SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "vdnode", "STUB_NODES": "vdnode",
                "VERL_DEPLOY_SCRIPTS": str(out), "VERL_DEPLOY_RAY_TEMP_DIR": str(tmp_path / "ray"), **env}
        return subprocess.run(["bash", str(out / script)], capture_output=True, text=True, env=full, timeout=60,
                              cwd=out)

    return {"generate": generate, "run": run, "log": log, "verl": verl}


def calls(job, tool: str) -> list[str]:
    path = job["log"] / f"{tool}.calls"
    return path.read_text().splitlines() if path.exists() else []


def trainer_env(job) -> dict[str, str]:
    lines = (job["log"] / "python3.env").read_text().splitlines()
    return dict(line.split("=", 1) for line in lines if "=" in line)


def tagged(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.startswith(("[submit.sbatch] error", "[submit.sbatch] failed",
                                                                   "[start_verl] error", "[start_verl] fix",
                                                                   "[start_verl] failed", "[run_training] error",
                                                                   "[run_training] failed"))]


def test_the_head_address_is_slurms_node_addr_when_the_name_does_not_resolve(job):
    ran = job["run"](job["generate"](), STUB_NODE_ADDR="127.0.0.1")
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "Ray head vdnode at 127.0.0.1 (from Slurm's NodeAddr 127.0.0.1)" in ran.stdout
    assert trainer_env(job)["MASTER_ADDR"] == "127.0.0.1" and tagged(ran.stdout + ran.stderr) == []
    # the hand-over line comes after the scripts' own steps, just before the trainer
    assert ran.stdout.index("Ray head vdnode") < ran.stdout.index(HANDOVER) < ran.stdout.index("trainer: started")
    assert "start_verl.sh on the head exited with status 0" in ran.stdout


def test_a_resolvable_name_without_its_own_node_addr_is_used(job):
    ran = job["run"](job["generate"](), SLURM_JOB_NODELIST="localhost", STUB_NODES="localhost")
    assert ran.returncode == 0, ran.stderr
    assert "Ray head localhost at 127.0.0.1 (from its name)" in ran.stdout


def test_a_given_address_wins_and_slurm_is_not_asked(job):
    out = job["generate"]()
    ran = job["run"](out, VERL_DEPLOY_MASTER_ADDR="10.9.8.7", STUB_NODE_ADDR="127.0.0.1")
    assert ran.returncode == 0 and "Ray head vdnode at 10.9.8.7 (from VERL_DEPLOY_MASTER_ADDR)" in ran.stdout
    assert not [c for c in calls(job, "scontrol") if c.startswith("show node")]
    flagged = job["run"](job["generate"]("--master-addr", "10.1.2.3"))
    assert flagged.returncode == 0 and "Ray head vdnode at 10.1.2.3 (from --master-addr)" in flagged.stdout
    assert trainer_env(job)["MASTER_ADDR"] == "10.1.2.3"


def test_an_address_that_cannot_be_found_is_one_line_naming_the_node_and_the_fix(job):
    ran = job["run"](job["generate"](), STUB_NODE_ADDR="vdnode-ib")
    assert ran.returncode == 2 and calls(job, "srun") == []
    errors = [line for line in ran.stderr.splitlines() if " error: " in line]
    assert errors == ["[submit.sbatch] error: no address for the Ray head, node vdnode: neither its name nor "
                      "Slurm's NodeAddr (vdnode-ib) resolves (getent ahostsv4); fix: give the head's address with "
                      "--master-addr ADDR (or VERL_DEPLOY_MASTER_ADDR=ADDR in sbatch's environment), or set NodeAddr "
                      "for vdnode in slurm.conf"]
    seen = read_failure((ran.stdout + ran.stderr).encode())
    assert (seen.script, seen.step, seen.status) == ("submit.sbatch", "finding the Ray head's address", 2)
    assert seen.fixes[0].startswith("give the head's address with --master-addr ADDR")


@pytest.mark.parametrize("env,step,said", [
    ({"STUB_NODES_ERROR": "Unable to contact slurm controller"}, "reading the job's nodes",
     "scontrol show hostnames vdnode failed (its message is above)"),
    ({"STUB_NODES": ""}, "reading the job's nodes", "scontrol show hostnames named no node"),
    ({"STUB_NODE_ADDR": "127.0.0.1", "STUB_SRUN_ERROR": "Unable to create step for job 42"},
     "running start_verl.sh on the nodes (srun)", "srun ran no start_verl.sh on the head (srun exit status 1"),
])
def test_each_early_step_of_the_job_that_fails_prints_its_line(job, env, step, said):
    ran = job["run"](job["generate"](), **env)
    assert ran.returncode == 2
    lines = tagged(ran.stderr)
    assert lines[0].startswith(f"[submit.sbatch] error: {said}") and "; fix: " in lines[0], ran.stderr
    assert lines[-1] == f"[submit.sbatch] failed at: {step} (exit status 2)"


@pytest.mark.parametrize("env,step,first", [
    ({"STUB_IMPORT_ERROR": "ModuleNotFoundError: No module named 'verl'"}, "checking that recipe.dapo.main_dapo imports",
     "[start_verl] error: recipe.dapo.main_dapo does not import from"),
    ({"STUB_RAY_START_ERROR": "ray: cannot create /tmp/ray: Permission denied"}, "starting the Ray head", None),
])
def test_each_early_step_of_start_verl_that_fails_says_which(job, env, step, first):
    ran = job["run"](job["generate"](), STUB_NODE_ADDR="127.0.0.1", **env)
    assert ran.returncode != 0 and HANDOVER not in ran.stdout and not (job["log"] / "python3.env").exists()
    seen = read_failure((ran.stdout + ran.stderr).encode())
    assert (seen.script, seen.step) == ("start_verl.sh", step), ran.stderr
    assert seen.status == ran.returncode
    if first:
        assert tagged(ran.stderr)[0].startswith(first) and seen.fixes  # the entry check names its fix
    else:
        assert "Permission denied" in " ".join(seen.last_lines)  # ray's own word, after every try
        assert len([c for c in calls(job, "ray") if c.startswith("start --head")]) == 3  # VERL_DEPLOY_RAY_START_TRIES


def test_run_training_names_a_missing_entry_file_and_never_hands_over(job):
    out = job["generate"]()
    (job["verl"] / "recipe" / "dapo" / "main_dapo.py").unlink()
    ran = job["run"](out, "start_verl.sh", VERL_DEPLOY_SKIP_ENTRY_CHECK="1", VERL_DEPLOY_MASTER_ADDR="127.0.0.1")
    assert ran.returncode == 2 and HANDOVER not in ran.stdout
    assert tagged(ran.stderr)[0].startswith("[run_training] error: recipe/dapo/main_dapo.py is missing under ")
    assert tagged(ran.stderr)[-1] == "[run_training] failed at: finding recipe/dapo/main_dapo.py (exit status 2)"
    assert "run_training.sh exited with status 2" in ran.stdout


def record_with_log(run_id: str, log_text: str, scripts_text: str) -> RunRecord:
    record = RunRecord(id=run_id, backend="slurm", spec={})
    scripts = record.directory / "attempt-1" / "scripts"
    scripts.mkdir(parents=True)
    (scripts / "run_training.sh").write_text(scripts_text)
    log = record.directory / "attempt-1" / "train.log"
    log.write_text(log_text)
    record.attempts.append(Attempt(n=1, features=[], reason="launch", log=str(log)))
    return record


def test_the_cause_of_a_job_that_printed_nothing_says_so_and_a_handed_over_one_is_the_trainings():
    pump = "[verl-deploy] slurm job 5: submitted\n[verl-deploy] slurm job 5: FAILED, exit code 2\n"
    quiet = record_with_log("quiet", pump, f"echo '{HANDOVER} python3 -m x'\n")
    failure = script_failure(quiet, 2)
    assert failure["class"] == "script_failed" and failure["exit_status"] == 2
    assert failure["cause"] == ("the training never started: verl-deploy's scripts ended before handing over to "
                                "it (exit status 2); they printed nothing")
    assert "verl-deploy logs quiet" in failure["fix"]
    said = record_with_log("said", pump + "[submit.sbatch] job 5: 1 node(s) vdnode\n\x1b[31mray: bad option\x1b[0m\n"
                           "[start_verl] failed at: starting the Ray head (exit status 2)\n", f"echo '{HANDOVER}'\n")
    failure = script_failure(said, 2)
    assert failure["cause"] == ("the training never started: verl-deploy's start_verl.sh failed at starting the Ray "
                                "head (exit status 2); its last lines: [submit.sbatch] job 5: 1 node(s) vdnode | "
                                "ray: bad option")
    assert failure["lines"] == [{"line": 3, "text": "[submit.sbatch] job 5: 1 node(s) vdnode"},
                                {"line": 4, "text": "ray: bad option"}]
    handed = record_with_log("handed", pump + f"{HANDOVER} python3 -m x\nTraceback ...\n", f"echo '{HANDOVER}'\n")
    assert script_failure(handed, 1) is None  # the training ran: the log's diagnosis speaks
    old = record_with_log("old", pump, "exec python3 -m x\n")  # scripts of a version without the hand-over line
    assert script_failure(old, 2) is None


SCRIPTS_THEN_TRAINING = (
    "2026-01-02 10:00:00,000\tERROR gcs_rpc_client.h:179: Failed to connect to GCS at address 10.0.0.1:6379 within 5 s\n"
    "[start_verl] ray start failed; stopping what it started (session unknown) and trying again\n"
    "[start_verl] started this run's Ray head at 10.0.0.1:6379\n"
    f"{HANDOVER} python3 -m recipe.dapo.main_dapo\n"
    "omegaconf.errors.ConfigAttributeError: Key 'rollout_n' is not in struct\n")


def _fatal_read(record: RunRecord, *, in_two: bool = False) -> list[str]:
    """The fatal failures the supervisor's reading keeps, the log read as it grows (whole lines, as the follower
    hands them over), in one read or in two: the scripts' lines first, the training's appended later."""
    from verl_deploy.runs.follow import _reading

    log = Path(record.attempts[-1].log)
    whole = log.read_text()
    if in_two:
        log.write_text(whole[:whole.index(HANDOVER)])
    reading = _reading(record, record.attempts[-1])
    reading.read()
    if in_two:
        with log.open("a") as out:
            out.write(whole[whole.index(HANDOVER):])
        reading.read()
    reading.drain()
    return [failure.class_id for _, failure in reading.fatal]


@pytest.mark.parametrize("in_two", [False, True])
def test_a_failure_the_scripts_printed_before_handing_over_starts_no_grace(in_two):
    """start_verl.sh tries ray start again after a failure; a fatal reading of the first try's line made the
    supervisor stop the run 120 s later although the retry had worked (CI saw it on Slurm). After the hand-over,
    the training's failure lines start the grace as before."""
    record = record_with_log(f"retried-{in_two}", SCRIPTS_THEN_TRAINING, f"echo '{HANDOVER}'\n")
    assert _fatal_read(record, in_two=in_two) == ["hydra_config_error"]


def test_scripts_without_the_hand_over_line_or_a_resumed_reading_past_it_keep_every_fatal_line():
    old = record_with_log("old-scripts", SCRIPTS_THEN_TRAINING, "exec python3 -m x\n")
    assert _fatal_read(old) == ["ray_cluster_startup", "hydra_config_error"]
    resumed = record_with_log("resumed", SCRIPTS_THEN_TRAINING, f"echo '{HANDOVER}'\n")
    past = SCRIPTS_THEN_TRAINING.index(HANDOVER)
    resumed.scan = {"offset": SCRIPTS_THEN_TRAINING.index("\n", past) + 1, "lines": 4}
    assert _fatal_read(resumed) == ["hydra_config_error"]
    before = record_with_log("resumed-before", SCRIPTS_THEN_TRAINING, f"echo '{HANDOVER}'\n")
    before.scan = {"offset": SCRIPTS_THEN_TRAINING.index("\n") + 1, "lines": 1}  # a new supervisor, still before it
    assert _fatal_read(before) == ["hydra_config_error"]


def test_a_local_run_whose_ray_head_cannot_start_is_told_as_the_scripts_failure(trainer, tmp_path):  # noqa: F811
    shim = tmp_path / "ray-shim"
    shim.mkdir()
    (shim / "ray").write_text("#!/usr/bin/env bash\n"
                              "if [ \"$1\" = start ]; then echo \"ray: session dir /tmp/vd-x: Read-only file system\" >&2;"
                              " exit 1; fi\nexit 1\n")
    (shim / "ray").chmod(0o755)
    result = launch(trainer, "--follow", "--json", env={"PATH": f"{shim}:{trainer['env']['PATH']}"})
    final = json.loads(result.stdout)
    assert result.returncode == 1 and final["state"] == "failed", result.stderr[-2000:]
    failure = final["failure"]
    assert failure["class"] == "script_failed" and failure["step"] == "starting the Ray head"
    assert failure["cause"].startswith("the training never started: verl-deploy's start_verl.sh failed at starting "
                                       "the Ray head (exit status 1); its last lines: ")
    assert "Read-only file system" in failure["cause"] and len(final["attempts"]) == 1
    shown = run_cli("status", final["id"], env=trainer["env"]).stdout
    assert "script_failed — the training never started" in " ".join(shown.split())
    assert "no known failure" not in shown
    assert os.path.exists(final["log"])



OOM_LINE = ("RuntimeError: NPU out of memory. Tried to allocate 5.03 GiB (NPU 3; 60.96 GiB total capacity; 49.47 GiB "
            "already allocated; 49.47 GiB current active; 1.32 GiB free; 57.55 GiB reserved in total by PyTorch)\n")
EXIT_LINE = "[start_verl] run_training.sh exited with status 1\n"


def _stop_times(monkeypatch, name: str, training: str) -> list[int]:
    """The seconds after the log was read at which the supervisor's reading says "stop the attempt now"."""
    from verl_deploy.runs import follow

    clock = [1000.0]
    monkeypatch.setattr(follow.time, "monotonic", lambda: clock[0])
    record = record_with_log(name, f"{HANDOVER} python3 -m x\n{training}", f"echo '{HANDOVER}'\n")
    reading = follow._reading(record, record.attempts[-1])
    reading.drain()
    stops = []
    for after in (4, 6, 29, 31, 119, 121):
        clock[0] = 1000.0 + after
        if reading.fatal_waited_out():
            stops.append(after)
    return stops


def test_start_verls_exit_line_lengthens_a_failures_grace_to_its_ray_cleanup_and_never_shortens_it(monkeypatch):
    """An OOM gets 5 s before the supervisor ends the attempt; once start_verl.sh printed the training's exit status
    its EXIT trap is stopping Ray, which gets 30 s from that line. A failure with the long grace (120 s: a driver
    that may still end by itself) keeps it. The line counts only as start_verl.sh prints it, at a line's start."""
    assert _stop_times(monkeypatch, "oom", OOM_LINE)[0] == 6
    assert _stop_times(monkeypatch, "oom-exit", OOM_LINE + EXIT_LINE)[0] == 31
    assert _stop_times(monkeypatch, "config-exit", "omegaconf.errors.ConfigAttributeError: Key 'x' is not in struct\n"
                       + EXIT_LINE)[0] == 121
    echoed = f"(TaskRunner pid=7) old log: {EXIT_LINE}"
    assert _stop_times(monkeypatch, "oom-echoed", OOM_LINE + echoed)[0] == 6
