"""The package type-checks: mypy (configured in pyproject.toml) finds no error in src/verl_deploy."""

from __future__ import annotations

import subprocess
import sys

from conftest import ROOT


def test_mypy_finds_no_error_in_the_package():
    result = subprocess.run([sys.executable, "-m", "mypy", "src/verl_deploy"], cwd=ROOT, capture_output=True,
                            text=True, timeout=600)
    assert "No module named mypy" not in result.stderr, "mypy is part of the test extra: pip install '.[test]'"
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert "Success: no issues found" in result.stdout
