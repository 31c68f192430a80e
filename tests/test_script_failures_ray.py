"""The Ray Jobs path runs run_training.sh itself (no start_verl.sh): a failure there before it hands over to the
trainer is the scripts', on a real Ray head with the stand-in trainer (tests/test_ray.py's cluster)."""

from __future__ import annotations

import json
from pathlib import Path

from test_ray import cluster, job_host, launch  # noqa: F401  (fixtures: a real Ray head and a job host)


def test_a_ray_job_whose_run_training_fails_before_the_training_is_told_as_that(job_host):  # noqa: F811
    """The Ray Jobs path runs run_training.sh itself: a verl source root without the recipe fails there."""
    (Path(job_host["args"][job_host["args"].index("--run-dir") + 1]) / "recipe" / "dapo" / "main_dapo.py").unlink()
    result = launch(job_host, "--follow", "--json")
    final = json.loads(result.stdout)
    assert result.returncode == 1 and final["state"] == "failed", result.stderr[-2000:]
    failure = final["failure"]
    assert failure["class"] == "script_failed" and len(final["attempts"]) == 1
    assert failure["cause"].startswith("the training never started: verl-deploy's run_training.sh failed at finding "
                                       "recipe/dapo/main_dapo.py (exit status 2): recipe/dapo/main_dapo.py is missing "
                                       "under "), failure
    assert final["attempts"][0]["exit_code"] == 1  # the Ray job's FAILED; the script's own status is in the cause
