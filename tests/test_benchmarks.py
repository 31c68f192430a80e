"""Every benchmark runs as its docstring says, in its quickest mode, without pytest (a benchmark is run with
`python benchmarks/X.py`, not under the test runner: here a `pytest` that refuses to import proves it)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import child_env

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
# needs verl 0.9.1 installed for verify-env: tests/test_migrate.py runs it with the tests' copy
NEEDS_VERL = {"migrate_to_091.py"}


def test_every_benchmark_is_covered():
    assert {p.name for p in BENCHMARKS.glob("*.py")} - RUNS_THE_SUITE - NEEDS_VERL == set(QUICKEST)
    for name in RUNS_THE_SUITE:
        assert "after the README's test install" in (BENCHMARKS / name).read_text().split('"""')[1]


def run_benchmark(name: str, arguments: list[str], expected: str, tmp_path: Path, env: dict | None = None) -> None:
    """Run benchmarks/NAME as its docstring says, where `import pytest` fails, and find `expected` in its output."""
    text = (BENCHMARKS / name).read_text()
    assert f"python benchmarks/{name}" in text.split('"""')[1]  # the docstring says how to run it
    blocker = tmp_path / "no-pytest" / "pytest"
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text("raise ModuleNotFoundError(\"No module named 'pytest'\")\n")
    env = child_env({**os.environ, "PYTHONPATH": str(blocker.parent), "TMPDIR": str(tmp_path), **(env or {})})
    result = subprocess.run([sys.executable, str(BENCHMARKS / name), *arguments], capture_output=True, text=True,
                            env=env, cwd=tmp_path, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert re.search(expected, result.stdout, re.M), result.stdout[-2000:] + result.stderr[-2000:]


@pytest.mark.parametrize("name", sorted(QUICKEST))
def test_the_benchmark_runs_as_its_docstring_says_without_pytest(name, tmp_path):
    arguments, expected = QUICKEST[name]
    run_benchmark(name, arguments, expected, tmp_path)

