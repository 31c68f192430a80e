"""Run ids sort by when the run was made, also inside one second: `runs` lists newest first and `status` without
an id shows the newest run, when a rehearsal, its resume and the real run all start within a second."""

from __future__ import annotations

import re
import time

from verl_deploy.runs import record


def test_ids_made_a_few_milliseconds_apart_list_newest_first(tmp_path, monkeypatch):
    monkeypatch.setenv("VERL_DEPLOY_STATE_DIR", str(tmp_path))
    made = []
    for _ in range(12):
        run_id = record.new_run_id()
        assert re.fullmatch(r"\d{8}-\d{6}-[0-9a-f]{4}", run_id)  # the format `status` and the docs show
        folder = record.runs_dir() / run_id
        folder.mkdir(parents=True)
        (folder / "run.json").write_text("{}")
        made.append(run_id)
        time.sleep(0.002)
    assert record.list_runs() == made[::-1]
    assert record.find_run(None) == made[-1]
    assert len(set(made)) == len(made)
