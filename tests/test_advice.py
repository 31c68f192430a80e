"""The advice `diagnose` gives for a device OOM names the recompute settings the recompute feature really applies
(features.py), so a user who types them gets what `launch`'s recovery would have added."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import run_cli
from test_report import verl_log


def test_the_oom_fix_names_the_recompute_values_the_feature_sets(tmp_path):
    from verl_deploy.features import BY_NAME
    from verl_deploy.watch.signatures import load_table

    fix = " ".join(load_table().failure_class("device_oom").fix.split())
    from verl_deploy.spec import RunSpec

    spec = RunSpec()  # the feature sets the granularity; how it recomputes is the spec's (block, 8 by default)
    applied = {**BY_NAME["recompute"].on, "recompute_method": spec.recompute_method,
               "recompute_num_layers": spec.recompute_num_layers}
    for knob, value in applied.items():
        assert f"{knob}={value}" in fix, (knob, value)
    shown = run_cli("diagnose", str(verl_log(Path(tmp_path) / "train.log"))).stdout
    flat = " ".join(re.sub(r"\s+", " ", shown).split())
    assert "recompute_granularity=full, recompute_method=block, recompute_num_layers=8" in flat
