"""Rules whose check lives in the DAPO recipe's trainer (recipe/dapo, not in verl's wheels): the cited lines
are read in the recipe sources kept as fixtures, and `plan` refuses the input before a model loads."""

from __future__ import annotations

import json
import re

import pytest

from conftest import FIXTURES, run_cli
from verl_deploy.rules import RULES

RECIPE_TREES = {"0.6.0": "verl-v0.6.0", "0.7.0": "verl-v0.7.0", "e7f8895": "verl-recipe-e7f8895"}


def test_the_filter_groups_metric_rule_cites_the_lookup_that_fails():
    [rule] = [r for r in RULES if r.name == "recipe_filter_groups_metric"]
    text = " ".join(rule.source.values())
    spans = re.findall(r"(\d+)-(\d+) \(([\w.]+)\)", text)
    assert {tag for _, _, tag in spans} == set(RECIPE_TREES)
    for first, last, tag in spans:
        lines = (FIXTURES / "recipes" / RECIPE_TREES[tag] / "recipe" / "dapo" / "dapo_ray_trainer.py").read_text() \
            .splitlines()[int(first) - 1:int(last)]
        assert "filter_groups.metric" in lines[0], (tag, lines[0])
        assert any("non_tensor_batch[metric_name]" in line for line in lines), tag


def _plan(tmp_path, *extra: str, metric: str = "null", version: str = "0.7.0"):
    config = tmp_path / "run.yaml"
    config.write_text(f"mode: dapo\nframework: megatron\ndevice: gpu\nverl_version: {version}\n"
                      f"filter_groups_metric: {metric}\n")
    result = run_cli("plan", "--config", str(config), "--json", *extra)
    return result, json.loads(result.stdout)


@pytest.mark.parametrize("version", ["0.7.0", "0.8.0"])
def test_group_filtering_without_a_metric_is_refused_with_the_flag_that_fixes_it(tmp_path, version):
    result, data = _plan(tmp_path, version=version)
    errors = [f for f in data["findings"] if f["level"] == "error" and f["field"] == "filter_groups_metric"]
    assert result.returncode != 0 and len(errors) == 1, data["findings"]
    assert "KeyError: None" in errors[0]["message"] and "--filter-groups-metric" in errors[0]["fix"]
    fixed, data = _plan(tmp_path, "--filter-groups-metric", "acc", version=version)
    assert not [f for f in data["findings"] if f["field"] == "filter_groups_metric"], data["findings"]


def test_no_metric_is_fine_when_groups_are_not_filtered(tmp_path):
    _, data = _plan(tmp_path, "--filter-groups", "no")
    assert not [f for f in data["findings"] if f["field"] == "filter_groups_metric"], data["findings"]
