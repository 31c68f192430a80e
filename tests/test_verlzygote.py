"""The warm verl interpreters (tests/verlzygote.py) behave as the cold Python they stand in for.

Every real-verl process of the suite may run on a fork of a server that imported verl once; these tests run
the same commands cold (VERL_DEPLOY_TESTS_COLD_VERL=1) and warm and compare what a caller sees: stdout,
stderr's last line, the exit status, argv, cwd, the environment, stdin — and verl-deploy's own verify
program's verdict on a real plan.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import realverl
import verlzygote
from verl_deploy.verify.program import build_program, parse_output

RELEASE = "0.9.1"


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """An environment whose `python -c`/`python -` with verl RELEASE go to servers of this module only."""
    site = realverl.verl_site(RELEASE)
    if site is None:
        pytest.skip(f"real verl {RELEASE} cannot be installed here: {realverl.why_not(RELEASE)}")
    directory = tmp_path_factory.mktemp("servers")
    env = realverl.env_with_verl(RELEASE)
    env.pop("VERL_DEPLOY_TESTS_COLD_VERL", None)
    env.update({verlzygote.DIR_VAR: str(directory), verlzygote.OWNER_VAR: str(os.getpid()),
                verlzygote.CLIENT_VAR: str(Path(verlzygote.__file__).resolve())})
    yield env, directory
    verlzygote.stop_servers(str(directory))


def run(env: dict, args: list[str], cold: bool, **kwargs) -> subprocess.CompletedProcess:
    env = {**env, "VERL_DEPLOY_TESTS_COLD_VERL": "1" if cold else "0"}
    return subprocess.run([sys.executable, *args], capture_output=True, text=True, env=env, timeout=300, **kwargs)


def both(env: dict, args: list[str], **kwargs) -> tuple[subprocess.CompletedProcess, subprocess.CompletedProcess]:
    """The command cold, then warm twice (the second warm run surely from a server already running)."""
    cold = run(env, args, cold=True, **kwargs)
    run(env, args, cold=False, **kwargs)
    return cold, run(env, args, cold=False, **kwargs)


PROGRAM = """
import os, sys, verl
print("argv", sys.argv[1:], "cwd", os.getcwd(), "marker", os.environ.get("ZYGOTE_TEST_MARKER"))
print("verl", verl.__version__, "path0", repr(sys.path[0]))
print("main", __name__, "stdin", sys.stdin.read() if len(sys.argv) > 1 and sys.argv[1] == "read" else "-")
"""


def test_a_warm_run_prints_and_exits_as_the_cold_one(served, tmp_path):
    """argv, cwd, the environment, stdin, sys.path after importing verl (ray puts its thirdparty_files first):
    for `python -c CODE` and for `python -` with the program on stdin."""
    env, directory = served
    env = {**env, "ZYGOTE_TEST_MARKER": "m1"}
    for args, stdin in ((["-c", PROGRAM, "read"], "from stdin\n"), (["-", "x"], PROGRAM)):
        cold, warm = both(env, args, cwd=tmp_path, input=stdin)
        assert cold.returncode == warm.returncode == 0, (cold.stderr[-800:], warm.stderr[-800:])
        assert warm.stdout == cold.stdout and str(tmp_path) in warm.stdout and "m1" in warm.stdout
    assert list(directory.glob("*.pid")), "no server served the warm runs"


@pytest.mark.parametrize("ending, status", [("sys.exit(3)", 3), ("raise ValueError('bad value')", 1),
                                            ("os._exit(5)", 5), ("sys.exit('a message')", 1), ("pass", 0),
                                            ("os.kill(os.getpid(), 9)", -9), ("os.kill(os.getpid(), 15)", -15)])
def test_exit_statuses_and_tracebacks_are_the_cold_ones(served, ending, status):
    env, _ = served
    code = f"import os, sys\nprint('before', flush=True)\n{ending}\n"  # the cold run needs no verl for this
    cold, warm = both(env, ["-c", code])
    assert cold.returncode == warm.returncode == status
    assert warm.stdout == cold.stdout == "before\n"
    assert (warm.stderr.strip().splitlines() or [""])[-1] == (cold.stderr.strip().splitlines() or [""])[-1]


def test_the_verify_program_gives_the_cold_verdict(served, tmp_path):
    """verl-deploy's own verify program at RELEASE: the same steps, verdicts and messages."""
    env, _ = served
    program = build_program("verl.trainer.main_ppo", "ppo_trainer",
                            ["data.train_batch_size=6", "actor_rollout_ref.actor.ppo_mini_batch_size=4",
                             "actor_rollout_ref.rollout.n=2", "trainer.n_gpus_per_node=2"],
                            sections=("actor_rollout_ref.actor", "critic"))
    cold, warm = both(env, ["-"], input=program, cwd=tmp_path)
    cold_result, warm_result = parse_output(cold.stdout), parse_output(warm.stdout)
    assert cold_result is not None and warm_result is not None, (cold.stderr[-800:], warm.stderr[-800:])
    assert warm_result == cold_result
    assert cold_result["verl_version"] == RELEASE and [s["step"] for s in cold_result["steps"]][:2] == [
        "locate_entry", "compose"]


def test_other_command_lines_run_cold(served, tmp_path):
    """`python -u -c` (an option first) and a script path are not served: no server is asked or started."""
    env, directory = served
    script = tmp_path / "script.py"
    script.write_text("import os; print(os.getcwd())\n")
    before = sorted(path.name for path in directory.iterdir())
    for args in (["-u", "-c", "import os; print(os.getcwd())"], [str(script)]):
        for _ in range(2):
            done = run(env, args, cold=False, cwd=tmp_path)
            assert done.returncode == 0 and done.stdout.strip() == str(tmp_path)
    assert sorted(path.name for path in directory.iterdir()) == before


def test_what_importing_reads_from_the_environment_keys_the_server():
    """A value verl, torch, ray or transformers may read at import gets its own server; verl-deploy's own
    variables (each worker has its own state directory) do not split them."""
    path = ["/site", "/lib"]
    base = {"PATH": "/bin", "VERL_DEPLOY_STATE_DIR": "/tmp/a"}
    same = verlzygote.key_of(sys.executable, path, base)
    assert verlzygote.key_of(sys.executable, path, {**base, "VERL_DEPLOY_STATE_DIR": "/tmp/b", "STUB": "1"}) == same
    for name in ("VERL_LOGGING_LEVEL", "RAY_DEDUP_LOGS", "CUDA_VISIBLE_DEVICES", "HF_HOME", "HOME",
                 "ASCEND_RT_VISIBLE_DEVICES", "RAY_CLIENT_MODE"):
        assert verlzygote.key_of(sys.executable, path, {**base, name: "1"}) != same, name
    # read only when they run (the child has the caller's environment), or the value that reads as unset
    for name, value in (("TOKENIZERS_PARALLELISM", "false"), ("RAY_CLIENT_MODE", "0")):
        assert verlzygote.key_of(sys.executable, path, {**base, name: value}) == same, name
    assert verlzygote.key_of(sys.executable, ["/other", "/lib"], base) != same
