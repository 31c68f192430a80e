"""No refusal of what verl runs, and every refusal names a fix that exists.

Each case goes through `plan` and through verl's own code of that release on CPU (`verify`: the entry's
config composed, validate_config, the actor/rollout/algorithm dataclasses), as test_verify.py does.
"""

from __future__ import annotations

import re

import pytest
import typer.main

from test_verify import dapo_plan, fixture_for, python_with, run_dir_with, site_or_skip
from verl_deploy.cli import app
from verl_deploy.findings import Finding
from verl_deploy.pipeline import prepare
from verl_deploy.verify import findings_for, verify_plan


def errors(findings: list[Finding]) -> list[Finding]:
    return [f for f in findings if f.level == "error"]


ACCEPTED = {"save_freq": 0, "gen_batch_size": 16, "batch_size": 32}  # checkpoints off; 2 generation batches a step


@pytest.mark.parametrize("version", ["0.6.1", "0.7.0", "0.9.1"])
def test_what_verl_runs_plan_accepts(tmp_path, version):
    site = site_or_skip(version)
    root = run_dir_with(tmp_path, site, fixture_for(version))
    recipe = {"dapo_source": "recipe"} if version.startswith("0.9") else {}  # the recipe's generation batch
    prepared = prepare(flags={"verl_version": version, "run_dir": str(root), **ACCEPTED, **recipe}, environ={})
    assert not errors(prepared.findings), errors(prepared.findings)
    assert any(f.field == "gen_batch_size" and f.level == "info" and "2 batches" in f.message for f in prepared.findings)
    verified = verify_plan(prepared.plan, python=str(python_with(tmp_path, site)))
    assert verified.status == "passed", verified.as_dict()


@pytest.mark.parametrize("version, verl_rejects", [("0.7.0", True), ("0.9.1", False)])
def test_token_sum_is_refused_exactly_where_verls_actor_config_rejects_it(tmp_path, version, verl_rejects):
    site = site_or_skip(version)
    root = run_dir_with(tmp_path, site, fixture_for(version))
    plan = dapo_plan(version, root, loss_agg_mode="token-sum")
    ours = [f for f in errors(prepare(flags={"verl_version": version, "run_dir": str(root),
                                             "loss_agg_mode": "token-sum"}, environ={}).findings)]
    theirs = errors(findings_for(verify_plan(plan, python=str(python_with(tmp_path, site))), plan, required=True))
    assert bool(theirs) == verl_rejects, [f.message for f in theirs]
    if verl_rejects:
        assert any("Invalid loss_agg_mode" in f.message for f in theirs)
        assert len(ours) == 1 and ours[0].field == "loss_agg_mode" and "--loss-agg-mode" in ours[0].fix
    else:
        assert not ours


def test_a_generation_batch_the_cap_cannot_fill_is_refused_with_flags_that_exist():
    prepared = prepare(flags={"batch_size": 32, "gen_batch_size": 8, "max_num_gen_batches": 2}, environ={})
    [refusal] = [f for f in errors(prepared.findings) if f.field == "gen_batch_size"]
    assert "--gen-batch-size" in refusal.fix and "--max-num-gen-batches to 4" in refusal.fix
    off = prepare(flags={"batch_size": 32, "gen_batch_size": 8, "filter_groups": False}, environ={})
    assert not errors(off.findings) and any(f.field == "gen_batch_size" and f.level == "warning" for f in off.findings)


def _all_flags() -> set[str]:
    """Every flag of every command, each command loaded as the lazy group loads it when it runs (its
    `.commands` holds only the ones some earlier import happened to register)."""
    command = typer.main.get_command(app)
    ctx = type(command).context_class(command)
    names: set[str] = set()
    for name in command.list_commands(ctx):
        sub = command.get_command(ctx, name)
        sub_ctx = type(sub).context_class(sub, parent=ctx)
        nested = [sub.get_command(sub_ctx, n) for n in sub.list_commands(sub_ctx)] if hasattr(sub, "list_commands") else []
        for child in [sub, *nested]:
            for param in child.params:
                names.update(o.split("/")[0] for o in [*param.opts, *param.secondary_opts])
    return names


@pytest.mark.parametrize("override", ["algorithm.filter_groups.enable=False", "trainer.test_freq=0",
                                      "actor_rollout_ref.actor.loss_agg_mode=token-sum",
                                      "actor_rollout_ref.actor.clip_ratio_high=0.3"])
def test_an_override_of_an_owned_key_points_at_a_flag_that_exists(override):
    prepared = prepare(flags={"verl_version": "0.9.1", "overrides": [override]}, environ={})
    refusals = [f for f in errors(prepared.findings) if f.field == "overrides"]
    assert refusals, f"{override}: verl-deploy sets this key from a field, so the override must be refused"
    flags = _all_flags()
    for finding in refusals:
        named = re.findall(r"--[a-z][a-z-]+", finding.fix)
        assert named and all(flag in flags for flag in named), (finding.fix, sorted(set(named) - flags))


def test_every_flag_a_field_owner_names_exists():
    from verl_deploy.override_owners import DERIVED_FROM

    flags = _all_flags()
    missing = {knob: flag for knob, text in DERIVED_FROM.items() for flag in re.findall(r"--[a-z][a-z-]+", text)
               if flag not in flags}
    assert not missing


# -- checks verl makes that plan did not: each through plan, and the chunking one through verl's own DataProto --

CHUNK = """
import sys, torch
from verl.protocol import DataProto
size, workers = int(sys.argv[1]), int(sys.argv[2])
try:
    DataProto.from_dict({"input_ids": torch.zeros(size, 1)}).chunk(workers)
    print("ok")
except AssertionError as exc:
    print("assert", exc)
"""


@pytest.mark.parametrize("version", ["0.7.0", "0.8.0", "0.9.1"])
@pytest.mark.parametrize("batch, gen, n, rejected", [(4, 6, 3, True), (4, 8, 3, False), (6, 6, 4, False)])
def test_agent_loop_chunking_is_refused_where_dataproto_chunk_asserts(version, batch, gen, n, rejected):
    import subprocess
    import sys

    import realverl

    site_or_skip(version)
    real = subprocess.run([sys.executable, "-c", CHUNK, str(gen * n), "8"], capture_output=True, text=True,
                          env=realverl.env_with_verl(version), timeout=300)
    assert real.returncode == 0, real.stderr[-2000:]
    assert real.stdout.startswith("assert" if rejected else "ok"), real.stdout
    if rejected:
        assert "only support equal chunk" in real.stdout
    recipe = {"dapo_source": "recipe"} if version.startswith("0.9") else {}  # the recipe trainer's AgentLoopManager
    prepared = prepare(flags={"verl_version": version, "batch_size": batch, "gen_batch_size": gen, "n_resp_per_prompt": n,
                              "mini_batch_size": 2, **recipe}, environ={})
    ours = [f for f in errors(prepared.findings) if f.field == "gen_batch_size"]
    assert bool(ours) == rejected, [f.message for f in prepared.findings]
    if rejected:
        assert "agent-loop workers" in ours[0].message and "--gen-batch-size" in ours[0].fix


def test_resume_path_without_a_path_is_refused():
    bad = prepare(flags={"verl_version": "0.9.1", "overrides": ["trainer.resume_mode=resume_path"]}, environ={})
    assert any("resume_from_path" in f.message for f in errors(bad.findings))
    good = prepare(flags={"verl_version": "0.9.1", "overrides": ["trainer.resume_mode=resume_path",
                                                                 "trainer.resume_from_path=/ck/global_step_20"]},
                   environ={})
    assert not any("resume_from_path" in f.message for f in errors(good.findings))


def test_ulysses_without_remove_padding_is_refused_on_the_fsdp_engine():
    flags = {"verl_version": "0.9.1", "framework": "fsdp", "device": "gpu",
             "overrides": ["actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"]}
    bad = prepare(flags={**flags, "features": "-remove_padding"}, environ={})
    assert any("use_remove_padding" in f.message for f in errors(bad.findings))
    assert not any("use_remove_padding" in f.message for f in errors(prepare(flags=flags, environ={}).findings))


def test_with_filter_groups_off_the_generation_batch_must_divide_by_the_mini_batch():
    flags = {"verl_version": "0.9.1", "framework": "fsdp", "device": "gpu", "batch_size": 16, "mini_batch_size": 8,
             "gen_batch_size": 20, "filter_groups": False, "dapo_source": "recipe"}
    bad = [f for f in errors(prepare(flags=flags, environ={}).findings) if f.field == "mini_batch_size"]
    assert bad and "generation batch" in bad[0].message
    assert not [f for f in errors(prepare(flags={**flags, "gen_batch_size": 24}, environ={}).findings)
                if f.field == "mini_batch_size"]


def test_engine_worker_batch_settings_must_agree():
    base = {"verl_version": "0.9.1", "framework": "fsdp", "device": "gpu"}
    split = prepare(flags={**base, "overrides": ["actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=False"]},
                    environ={})
    assert any(f.message.startswith("actor.use_dynamic_bsz=True but rollout.log_prob_use_dynamic_bsz=False")
               for f in errors(split.findings)), split.findings
    cleared = prepare(flags={**base, "features": "-dynamic_batch",
                             "overrides": ["actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu=null"]},
                      environ={})
    assert any("log_prob_micro_batch_size_per_gpu is null" in f.message for f in errors(cleared.findings))
    legacy = prepare(flags={**base, "verl_version": "0.7.0",
                            "overrides": ["actor_rollout_ref.rollout.log_prob_use_dynamic_bsz=False"]}, environ={})
    assert not any(f.message.startswith("actor.use_dynamic_bsz") for f in errors(legacy.findings))  # legacy workers


def test_megatron_fixed_micro_batches_with_vpp_must_group_by_pp():
    # 8 NPUs, TP 4 PP 2 -> DP 1; mini 3 x n 1 = 3 micro-batches of 1: not a multiple of PP 2 under VPP
    flags = {"verl_version": "0.9.1", "features": "-dynamic_batch,vpp", "batch_size": 3, "gen_batch_size": 9,
             "mini_batch_size": 3, "n_resp_per_prompt": 1}
    bad = [f for f in errors(prepare(flags=flags, environ={}).findings) if "virtual pipeline" in f.message]
    assert bad and "dynamic_batch on" in bad[0].fix and "PP 2" in bad[0].message
    ok = {**flags, "batch_size": 4, "gen_batch_size": 8, "mini_batch_size": 4}
    assert not [f for f in errors(prepare(flags=ok, environ={}).findings) if "virtual pipeline" in f.message]
    dynamic = {**flags, "features": "vpp"}
    assert not [f for f in errors(prepare(flags=dynamic, environ={}).findings) if "virtual pipeline" in f.message]


V1_CHUNK = """
import sys, torch
from verl.utils import tensordict_utils as tu
rows, workers = int(sys.argv[1]), int(sys.argv[2])
print([len(c) for c in tu.get_tensordict({"input_ids": torch.zeros(rows, 1)}).chunk(workers)])
"""


def test_the_v1_trainer_splits_its_prompts_unevenly_so_chunking_is_not_refused_there():
    """verl 0.9's V1 trainer (v1/agent_loop_tq.py) hands its agent-loop workers TensorDict.chunk's pieces with
    zip(strict=False): 18 rows over 8 workers run as uneven chunks, where DataProto.chunk asserts."""
    import subprocess
    import sys

    import realverl

    site_or_skip("0.9.1")
    real = subprocess.run([sys.executable, "-c", V1_CHUNK, "18", "8"], capture_output=True, text=True,
                          env=realverl.env_with_verl("0.9.1"), timeout=300)
    assert real.returncode == 0 and sum(eval(real.stdout)) == 18, real.stderr[-2000:]
    prepared = prepare(flags={"verl_version": "0.9.1", "batch_size": 6, "n_resp_per_prompt": 3, "mini_batch_size": 2},
                       environ={})
    assert prepared.plan.entry_module == "verl.trainer.main_ppo"
    assert not [f for f in errors(prepared.findings) if "agent-loop" in f.message]


@pytest.mark.parametrize("version", ["0.7.0", "0.9.1"])
@pytest.mark.parametrize("override, flags", [("algorithm.filter_groups.enable=False", {"filter_groups": False}),
                                             ("trainer.test_freq=0", {"test_freq": 0})])
def test_the_flag_a_refused_override_names_gives_a_plan_verl_accepts(tmp_path, version, override, flags):
    """Issue #24 item 2: the override is refused (verl-deploy owns the key) with a flag that exists, and that flag
    with the same value plans clean and passes verl's own validation of that release."""
    refused = [f for f in errors(prepare(flags={"verl_version": version, "overrides": [override]}, environ={}).findings)
               if f.field == "overrides"]
    named = re.findall(r"--[a-z][a-z-]+", refused[0].fix) if refused else []
    assert named and all(flag in _all_flags() for flag in named), refused
    site = site_or_skip(version)
    root = run_dir_with(tmp_path, site, fixture_for(version))
    prepared = prepare(flags={"verl_version": version, "run_dir": str(root), **flags}, environ={})
    assert not errors(prepared.findings), errors(prepared.findings)
    key, value = override.split("=")
    sent = {o.key: o.text() for o in prepared.plan.overrides}
    if key in sent:  # the flag sends the value the override meant
        assert sent[key] == override, sent[key]
    else:  # or leaves verl's own default, which is that value (V1 sends no filter_groups when it is off)
        from verl_deploy.profiles.keytables import key_table
        assert str(key_table(version)[key]) == value, (key, key_table(version)[key])
    verified = verify_plan(prepared.plan, python=str(python_with(tmp_path, site)))
    assert verified.status == "passed", verified.as_dict()


@pytest.mark.parametrize("given", ["reward.reward_kwargs.overlong_buffer_cfg.log=True",
                                   "+reward.reward_kwargs.overlong_buffer_cfg.log=True"])
def test_a_plain_override_of_a_key_the_launch_adds_is_added_the_same_way(given):
    """Core DAPO on 0.9.1 adds the overlong buffer's keys with '+' (main_ppo's config lacks them): a user's
    plain `key=value` for one of them replaces the launch's value and keeps the '+' Hydra needs."""
    prepared = prepare(flags={"verl_version": "0.9.1", "overrides": [given]}, environ={})
    assert not errors(prepared.findings), errors(prepared.findings)
    sent = [o.text() for o in prepared.plan.overrides if o.key == "reward.reward_kwargs.overlong_buffer_cfg.log"]
    assert sent == ["+reward.reward_kwargs.overlong_buffer_cfg.log=True"]
