"""A child process a test starts imports the verl_deploy under test, even when the test sets its own PYTHONPATH
(the fake Ascend host's torch_npu): otherwise a worktree's tests would test the main checkout's package."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import child_env, npu_host, run_cli  # noqa: F401  (npu_host: the fixture)

import verl_deploy

WHERE = "import verl_deploy, sys; print(verl_deploy.__file__)"


def test_a_child_with_its_own_pythonpath_imports_the_tree_under_test(npu_host):
    env = child_env({**os.environ, **npu_host["env"]})
    ran = subprocess.run([sys.executable, "-c", WHERE], capture_output=True, text=True, env=env, timeout=60)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == verl_deploy.__file__
    assert env["PYTHONPATH"].split(os.pathsep)[0] == npu_host["env"]["PYTHONPATH"]  # the test's own entries first


def test_the_cli_in_a_subprocess_runs_the_tree_under_test(tmp_path):
    marker = tmp_path / "site"
    marker.mkdir()
    (marker / "sitecustomize.py").write_text(
        "import atexit, sys\n"
        "atexit.register(lambda: print('IMPORTED', sys.modules['verl_deploy'].__file__, file=sys.stderr)\n"
        "                if 'verl_deploy' in sys.modules else None)\n")
    result = run_cli("features", env={"PYTHONPATH": str(marker)})
    assert result.returncode == 0, result.stderr[-2000:]
    assert f"IMPORTED {verl_deploy.__file__}" in result.stderr
