"""Every benchmark runs as its docstring says, in its quickest mode, without pytest (a benchmark is run with
`python benchmarks/X.py`, not under the test runner: here a `pytest` that refuses to import proves it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
QUICKEST = {  # benchmark -> (arguments, a line its output must have)
    "check.py": (["1"], r"median \d"),
    "cli_latency.py": (["1"], r"^--help +median"),
    "import_equivalence.py": (["3"], r"^\d of 3 verl launch scripts import to an equivalent config"),
    "memory.py": ([], r"misses:|predicted"),
    "recovery.py": (["1"], r"device-hours"),
    "report.py": (["5"], r"^report +[\d.]+ s \(read \+ \d+ SVG plots"),
    "watch.py": (["--size-mib", "2", "--dense-mib", "1"], r"failure-dense"),
}


# suite.py times the test suite itself: it runs pytest by design (its docstring says: after the test install)
RUNS_THE_SUITE = {"suite.py"}
# needs verl 0.9.1 installed for verify-env: its own test below gives it the tests' copy
NEEDS_VERL = {"migrate_to_091.py"}


def test_every_benchmark_is_covered():
    assert {p.name for p in BENCHMARKS.glob("*.py")} - RUNS_THE_SUITE - NEEDS_VERL == set(QUICKEST)
    for name in RUNS_THE_SUITE:
        assert "after the README's test install" in (BENCHMARKS / name).read_text().split('"""')[1]


@pytest.mark.parametrize("name", sorted(QUICKEST))
def test_the_benchmark_runs_as_its_docstring_says_without_pytest(name, tmp_path):
    arguments, expected = QUICKEST[name]
    text = (BENCHMARKS / name).read_text()
    assert f"python benchmarks/{name}" in text.split('"""')[1]  # the docstring says how to run it
    blocker = tmp_path / "no-pytest" / "pytest"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'pytest'\")\n")
    env = {**os.environ, "PYTHONPATH": str(blocker.parent), "TMPDIR": str(tmp_path)}
    result = subprocess.run([sys.executable, str(BENCHMARKS / name), *arguments], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(expected, result.stdout, re.M), result.stdout[-2000:]


def test_the_migration_benchmark_runs_one_script_through_verls_validation(tmp_path):
    import realverl

    site = realverl.verl_site("0.9.1")
    if site is None:
        pytest.skip(f"real verl 0.9.1 cannot be installed here: {realverl.why_not('0.9.1')}")
    root = tmp_path / "verify-env"
    root.mkdir()
    (root / "verl-0.9.1").symlink_to(site)  # verify-env uses this release instead of installing it
    blocker = tmp_path / "no-pytest" / "pytest"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'pytest'\")\n")
    env = {**os.environ, "PYTHONPATH": str(blocker.parent), "TMPDIR": str(tmp_path),
           "VERL_DEPLOY_VERIFY_ENV_DIR": str(root)}
    name = "migrate_to_091.py"
    assert f"python benchmarks/{name}" in (BENCHMARKS / name).read_text().split('"""')[1]
    result = subprocess.run([sys.executable, str(BENCHMARKS / name), "1", "verl-v0.7.0/recipe/dapo/test_dapo_7b.sh"],
                            capture_output=True, text=True, env=env, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(r"^1 of 1 verl launch scripts, imported and migrated to 0.9.1, pass", result.stdout, re.M), \
        result.stdout + result.stderr[-2000:]
