"""A run record that names a file outside its run's folder is refused, never read: `logs`, `report`,
`status` and `evidence` of a finished real run whose run.json points at a secret file, or whose
train.log was replaced by a symlink to it, print one line and none of the file."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from conftest import run_cli
from test_launch import launch, trainer, wait_for  # noqa: F401  (trainer is a fixture)

SECRET = "root:$6$not-for-you:19000:0:99999:7:::"
COMMANDS = (("logs",), ("report", "--output"), ("status",), ("evidence",))


def _refused(trainer, run_id: str, tmp: Path) -> None:
    for command in COMMANDS:
        args = [command[0], run_id, *command[1:]] + ([str(tmp / "report-out")] if len(command) > 1 else [])
        result = run_cli(*args, env=trainer["env"])
        shown = result.stdout + result.stderr
        assert SECRET not in shown, f"{command[0]} printed the file outside the run"
        assert result.returncode != 0, f"{command[0]}: {shown[-500:]}"
        assert "outside the run's folder" in shown and "Traceback" not in shown, f"{command[0]}: {shown[-500:]}"


@pytest.mark.parametrize("how", ["record names the file", "train.log is a symlink", "exit file is a symlink"])
def test_a_record_naming_a_file_outside_its_run_is_refused_by_every_reader(trainer, tmp_path, how):
    secret = tmp_path / "shadow"
    secret.write_text(SECRET + "\n")
    run = json.loads(launch(trainer, "--json").stdout)
    wait_for(trainer, run["id"], lambda d: d["state"] in ("succeeded", "failed"))
    path = Path(run["directory"]) / "run.json"
    assert run_cli("logs", run["id"], env=trainer["env"]).returncode == 0  # the intact run reads fine
    record = json.loads(path.read_text())
    attempt = record["attempts"][-1]
    if how == "record names the file":
        attempt["log"] = str(secret)
        path.write_text(json.dumps(record))
    elif how == "train.log is a symlink":
        os.unlink(attempt["log"])
        os.symlink(secret, attempt["log"])
    else:
        os.unlink(attempt["handle"]["exit_file"])
        os.symlink(secret, attempt["handle"]["exit_file"])
    _refused(trainer, run["id"], tmp_path)
