"""What `plan` shows is right: every RunSpec field is in `plan --all`, its JSON and (with its flag) `--help`;
the default `plan` shows every value that differs from its default with where it came from, and a mode's own
settings as deciding in that mode only."""

from __future__ import annotations

import json
import re

import pytest
from conftest import run_cli

from verl_deploy.spec import DECLARED, RunSpec, field_names

MODES = ("dapo", "one-step-off", "colocate-async", "separate-async", "fully-async")


def isolated(tmp_path) -> dict:
    return {"VERL_DEPLOY_STATE_DIR": str(tmp_path / "state"), "VERL_DEPLOY_CONFIG_DIR": str(tmp_path / "config"),
            "COLUMNS": "200"}


def rows_of(text: str) -> dict[str, str]:
    """field -> its line in plan's table (from its `field value source` header to the features line)."""
    lines = text.splitlines()
    start = next(i for i, line in enumerate(lines) if line.split()[:3] == ["field", "value", "source"])
    end = next(i for i, line in enumerate(lines) if line.startswith("features (mask"))
    names = set(field_names())
    return {line.split()[0]: line for line in lines[start + 1:end] if line.strip() and line.split()[0] in names}


def test_every_field_is_in_plan_all_its_json_and_with_its_flag_in_help(tmp_path):
    env = isolated(tmp_path)
    full = run_cli("plan", "--all", env=env)
    assert full.returncode == 0, full.stderr[-2000:]
    rows = rows_of(full.stdout)
    document = json.loads(run_cli("plan", "--all", "--json", env=env).stdout)
    helped = run_cli("plan", "--help", env=env).stdout
    for name in field_names():
        assert name in rows, f"{name} is not a row of plan --all"
        assert rows[name].split()[-1], name  # a value and a source
        assert name in document["spec"] and name in document["sources"], f"{name} is not in plan --all --json"
        for flag in DECLARED[name].flags:
            assert re.search(rf"[ ,]{flag}[ ,]", helped), f"{name}: {flag} is not in plan --help"


def test_a_field_no_listing_shows_would_be_a_defect():
    """Every field has a view section (declared.py `view=`): otherwise `plan --all` and the report cannot show it."""
    assert [name for name, meta in DECLARED.items() if not meta.view] == []


SPECS = [*[["--mode", mode, "--algorithm", algorithm, "--verl-version", "0.9.1"]
           for mode in MODES for algorithm in ("dapo", "grpo")],
         ["--device", "gpu", "--framework", "fsdp", "--verl-version", "0.9.1", "--devices", "0-3", "--train-tp", "2",
          "--train-pp", "1"],
         ["--nodes", "h1,h2", "--socket-ifname", "eth0", "--train-steps", "20"]]


def _shown(value) -> str:
    """A JSON value as plan's table writes it."""
    if isinstance(value, list):
        return ",".join(str(v) for v in value)
    return str(value)


@pytest.mark.parametrize("args", SPECS, ids=lambda args: " ".join(args))
def test_every_value_that_differs_from_its_default_is_shown_with_its_source(tmp_path, args):
    env = isolated(tmp_path)
    document = json.loads(run_cli("plan", "--json", *args, env=env).stdout)
    shown = run_cli("plan", *args, env=env)
    assert "Traceback" not in shown.stderr and document["spec"]["mode"] in shown.stdout.splitlines()[0]
    rows = rows_of(shown.stdout)
    differing = {name: value for name, value in document["spec"].items() if name != "swanlab_api_key"
                 and value != RunSpec.model_fields[name].get_default(call_default_factory=True)}
    assert differing  # each of these plans changes something
    for name, value in differing.items():
        assert name in rows, f"{name}={value!r} ({document['sources'][name]}) is not shown by the default plan"
        assert _shown(value) in rows[name] and document["sources"][name] in rows[name], rows[name]


@pytest.mark.parametrize("mode", MODES)
def test_a_modes_own_settings_are_deciding_in_that_mode_only(tmp_path, mode):
    env = isolated(tmp_path)
    shown = run_cli("plan", "--mode", mode, "--verl-version", "0.9.1", env=env)
    rows = rows_of(shown.stdout)
    own = {name for name, meta in DECLARED.items() if meta.deciding and "mode" in meta.when}
    used_here = {name for name in own if mode in DECLARED[name].when["mode"]}
    assert used_here <= set(rows), sorted(used_here - set(rows))
    assert not (own - used_here) & set(rows), sorted((own - used_here) & set(rows))
    if mode == "separate-async":
        assert rows["parameter_sync_step"].split()[1:] == ["1", "derived"]  # batch 32 / mini-batch 32, as sent
    full = rows_of(run_cli("plan", "--all", "--mode", mode, "--verl-version", "0.9.1", env=env).stdout)
    for name in own - used_here:  # --all says which mode uses what this one does not
        assert "used with mode " in full[name], full[name]


def test_the_async_settings_a_user_gives_are_shown_with_their_sources(tmp_path):
    env = isolated(tmp_path)
    config = tmp_path / "run.yaml"
    config.write_text("staleness_threshold: 0.5\npartial_rollout: false\n")
    shown = run_cli("plan", "--mode", "fully-async", "--algorithm", "grpo", "--verl-version", "0.9.1",
                    "--parameter-sync-step", "2", "--config", str(config), env=env)
    rows = rows_of(shown.stdout)
    assert rows["algorithm"].split()[1:] == ["grpo", "flag", "--algorithm"]
    assert rows["parameter_sync_step"].split()[1:] == ["2", "flag", "--parameter-sync-step"]
    assert rows["staleness_threshold"].split()[1:] == ["0.5", "file", str(config)]
    assert rows["partial_rollout"].split()[1:] == ["False", "file", str(config)]
    assert "(GRPO)" in shown.stdout.splitlines()[0]
    recipe = rows_of(run_cli("plan", "--verl-version", "0.9.1", "--dapo-source", "recipe", env=env).stdout)
    assert recipe["dapo_source"].split()[1:] == ["recipe", "flag", "--dapo-source"]
    default = run_cli("plan", "--verl-version", "0.9.1", env=env).stdout
    # where verl has the choice, it decides: DAPO from verl's core, the trainer the command really runs
    assert rows_of(default)["dapo_source"].split()[1:] == ["core", "derived"]
    assert "verl.trainer.main_ppo" in default
    assert "dapo_source" not in rows_of(run_cli("plan", env=env).stdout)  # verl 0.7.0: only the recipe


@pytest.mark.parametrize("args,unused", [
    (["--verl-version", "0.9.1"], {"gen_batch_size", "max_num_gen_batches"}),  # core DAPO: the V1 trainer
    (["--verl-version", "0.9.1", "--mode", "fully-async"], {"gen_batch_size", "filter_groups", "max_num_gen_batches"}),
    (["--verl-version", "0.9.1", "--dapo-source", "recipe"], set()),  # the recipe generates gen_batch_size rounds
])
def test_settings_the_trainer_ignores_are_shown_as_not_used(args, unused):
    """A derived gen_batch_size of 96 is not what the V1 trainer or fully-async generate per round (both take one
    prompt at a time): plan --all says so beside the value and plan --json lists it, instead of showing it as in
    effect."""
    rows = rows_of(run_cli("plan", "--all", *args).stdout)
    said = {name for name, row in rows.items() if "not used:" in row}
    assert said == unused, {name: rows[name] for name in said ^ unused}
    data = json.loads(run_cli("plan", "--json", *args).stdout)
    assert set(data["not_used"]) == unused


@pytest.mark.parametrize("mode", ["separate-async", "fully-async", "one-step-off"])
def test_a_split_mode_plans_with_its_own_defaults(mode):
    """A split mode's trainer has its own 4 devices (seed 000): the default layout is TP 4 x PP 1 there, not the
    colocated 4 x 2 that 8 devices need."""
    result = run_cli("plan", "--json", "--verl-version", "0.9.1", "--mode", mode)
    data = json.loads(result.stdout)
    assert data["ok"], [f["message"] for f in data["findings"] if f["level"] == "error"]
    assert data["spec"]["train_pp"] == 1 and data["sources"]["train_pp"] == "derived"


@pytest.mark.parametrize("args,field,fix", [
    (["--verl-version", "0.9.1", "--algorithm", "grpo", "--dapo-source", "recipe"], "dapo_source", "--algorithm dapo"),
    (["--verl-version", "0.8.0", "--dapo-source", "recipe"], "dapo_source", "--verl-version 0.9.0 or later"),
    (["--parameter-sync-step", "2"], "parameter_sync_step", "--mode separate-async"),
    (["--trainer-gpus", "4"], "trainer_gpus", "--mode one-step-off"),
    (["--verl-version", "0.9.1", "--mode", "one-step-off", "--warmup-batches", "2"], "warmup_batches",
     "--mode colocate-async"),
])
def test_a_flag_that_means_nothing_in_this_run_is_a_warning_naming_a_fix_that_works(args, field, fix):
    """Every field declared for some modes or releases (`when`/`since`) that the user sets where it means nothing
    is one warning naming it and what would make it count; the fix's flag and value are ones plan accepts."""
    data = json.loads(run_cli("plan", "--json", *args).stdout)
    said = [f for f in data["findings"] if f["field"] == field and "has no effect" in f["message"]]
    assert len(said) == 1 and said[0]["level"] == "warning" and fix in said[0]["fix"], said
    flag, value = fix.split()[:2]
    if flag != "--verl-version":  # the fix's setting is one plan takes (the field's own flag dropped)
        without = [a for i, a in enumerate(args) if DECLARED[field].flag not in (a, args[i - 1] if i else "")]
        taken = json.loads(run_cli("plan", "--json", *without, flag, value).stdout)
        assert not [f for f in taken["findings"] if "has no effect" in f["message"]]
    defaults = json.loads(run_cli("plan", "--json").stdout)  # the defaults set nothing without effect
    assert not [f for f in defaults["findings"] if "has no effect" in f["message"]]


@pytest.mark.parametrize("args,says,never", [
    (["--device", "npu"], "beside the sleeping actor", "devices of its own"),
    (["--device", "npu", "--mode", "one-step-off"], "devices of its own", "beside the sleeping actor"),
    (["--device", "gpu"], "GPU DAPO scripts", "vllm-ascend"),
])
def test_the_rollout_memory_defaults_reason_is_true_of_this_layout(args, says, never):
    """Where gpu_memory_utilization comes from is said for the layout at hand: no actor sleeps beside a split
    mode's rollout, and a GPU run is not told about vllm-ascend."""
    data = json.loads(run_cli("plan", "--json", *args).stdout)
    why = data["sources"]["gpu_memory_utilization"]
    assert says in why and never not in why, why
