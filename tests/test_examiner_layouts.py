"""The examiner's layouts (tests/examiner_layouts.py, written from verl's code at each release before reading the
rules or the held-out set): each goes through `plan`, and where the deciding code runs on CPU, through that
release's own code (or megatron-core 0.13.1's); plan must refuse exactly what verl rejects.

Measured when the layouts were first run (commit dfa360f + the layout fix for p01/p02, before any rule change):
plan agreed with verl on 40 of 56 -- it refused 16 of the 30 layouts verl rejects (missing: DP chunking with
balance off on 0.6.1, rollout replica vs node size, rollout expert/pipeline parallel, 0.6.1's token budget with
chunked prefill, vLLM's LoRA rank, colocate-async's parameter_sync_step, the V1 replay buffer's in-flight bound,
0.7.0's unknown resume_mode, the dual-clip bound clip_ratio_c, adaptive/unknown KL controllers, KL type 'full')
and refused 2 of the 26 that verl runs (mini-batch above the batch with dynamic batching on V1, which pads; the
'file' tracker). verl's own code ran 49 of the 56 on CPU and gave the written verdict on all 49.
After the rules the measurement asked for (rules/rollout.py, algorithm.py resume_mode_known / dual_clip_bound /
kl_controller_known / kl_estimators_known, async_modes.py per-mode parameter_sync_step and v1_inflight_gen_batches,
batch.py mini_batch_within_batch and the dispatch chunk with balance off, lengths.py 0.6.x chunked prefill, the
'file' tracker): 56 of 56.

The probes run verl's functions as shipped (some taken out of modules that import vLLM, Ray or TransferQueue
with `ast`, their code unchanged): validate_config and the config dataclasses on the config the launch composes
(Hydra over the release's own files), DataProto.chunk, RolloutReplica.__init__, the V1 trainer's replay-buffer
construction, step() and _load_checkpoint, the legacy trainer's _load_checkpoint, the policy loss, the KL
controller and penalty, the DAPO reward manager and Tracking. Cases marked None in the layouts are judged by plan
only, against the cited code (vLLM and the Megatron engine cannot run here).
"""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

import realverl
from examiner_layouts import AFTER, CONFIG, EXAMINER, UNPROBED
from test_heldout_layouts import MORE as HELDOUT_PROBES
from test_layout_rules import MORE_PROBES as LAYOUT_PROBES
from test_runtime_rules import (PROBE, V1_PAD, composed_yaml, errors, mcore_site, models,  # noqa: F401
                                planned, run_probes)

EXAMINER_PROBES = r'''
def load_classes(path, names, extra=None):
    """verl's classes `names` from `path`, compiled with the file's imports that load here."""
    tree, ns = module_namespace(path, extra)
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name in names:
            exec(compile(ast.Module([node], []), path, "exec"), ns)
    return [ns[name] for name in names]

# names from TransferQueue (not installed here) that the V1 files' signatures mention; the code run never uses them
V1_NAMES = {"KVBatchMeta": object}

def composed(config_yaml):
    from omegaconf import OmegaConf
    return OmegaConf.load(config_yaml)

def replica_world(tp, gpus_per_node):
    # verl/workers/rollout/replica.py RolloutReplica.__init__ with a rollout config of TP x DP 1 x PP 1
    class Config: pass
    config = Config()
    config.tensor_model_parallel_size, config.data_parallel_size, config.pipeline_model_parallel_size = tp, 1, 1
    fn = load_function(verl_file("workers/rollout/replica.py"), "__init__", "RolloutReplica",
                       {"omega_conf_to_dataclass": lambda value, *a, **k: value})
    class Self: pass
    fn(Self(), replica_rank=0, config=config, model_config=None, gpus_per_node=gpus_per_node)

def rollout_dataclass(config_yaml):
    rollout_dataclass_from_plan(config_yaml)

def vllm_lora_rank(rank):
    return load_function(verl_file("workers/rollout/vllm_rollout/utils.py"), "get_vllm_max_lora_rank")(rank)

def separate_async_init(config_yaml):
    # PPOTrainerSeparateAsync.__init__: its asserts, then super().__init__ (the base trainer: devices, Ray)
    fn = load_function(verl_file("trainer/ppo/v1/trainer_separate_async.py"), "__init__", "PPOTrainerSeparateAsync",
                       {"need_reward_model": lambda config: False})
    class Self: pass
    try:
        fn(Self(), composed(config_yaml))
    except RuntimeError as exc:
        if "super" in str(exc):
            raise Reached()
        raise

def v1_step(config_yaml):
    # PPOTrainer.step's first statements, parameter_sync_step read as PPOTrainer.__init__ reads it (trainer_base.py:130)
    config = composed(config_yaml)
    fn = load_function(verl_file("trainer/ppo/v1/trainer_base.py"), "step", "PPOTrainer", V1_NAMES)
    class Self:
        def __getattr__(self, name): raise Reached()  # the first thing step() does after its check
    me = Self(); me.config = config; me.trainer_mode = config.trainer.v1.trainer_mode
    me.parameter_sync_step = config.trainer.v1.get(me.trainer_mode, {}).get("parameter_sync_step", 1)
    fn(me, {}, {})

def replay_buffer(config_yaml):
    # PPOTrainer._build_replay_buffer -> ReplayBuffer / ReplayBufferAsync.__init__ (TransferQueue is not used there)
    import logging, types
    config = composed(config_yaml)
    path = verl_file("trainer/ppo/v1/replay_buffer.py")
    sync, asynchronous = load_classes(path, ["ReplayBuffer", "ReplayBufferAsync"], V1_NAMES)
    base = verl_file("trainer/ppo/v1/trainer_base.py")
    extra = {**V1_NAMES, "ReplayBuffer": sync, "ReplayBufferAsync": asynchronous, "logger": logging.getLogger("probe")}
    build = load_function(base, "_build_replay_buffer", "PPOTrainer", extra)
    resolve = load_function(base, "_resolve_filter_groups_metric", "PPOTrainer", extra)
    class Self: pass
    me = Self(); me.config = config; me.trainer_mode = config.trainer.v1.trainer_mode
    me._add_prompts_to_generate = lambda *a, **k: None
    me._resolve_filter_groups_metric = types.MethodType(resolve, me)
    return type(build(me)).__name__

def v1_load_checkpoint(config_yaml):
    import logging
    fn = load_function(verl_file("trainer/ppo/v1/trainer_base.py"), "_load_checkpoint", "PPOTrainer",
                       {**V1_NAMES, "logger": logging.getLogger("probe")})
    class Group:
        def load_checkpoint(self, *a, **k): raise Reached()
    class Self: pass
    me = Self(); me.config = composed(config_yaml); me.actor_rollout_wg = Group(); me.use_critic = False
    return fn(me)

def legacy_load_checkpoint(config_yaml):
    return load_checkpoint_from_plan(config_yaml)

def policy_loss(config_yaml):
    # the actor's policy loss (core_algos, as the workers call it) on one small batch
    import torch
    from verl.utils.config import omega_conf_to_dataclass
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    actor = omega_conf_to_dataclass(composed(config_yaml).actor_rollout_ref.actor)
    mode = actor.policy_loss.get("loss_mode", "vanilla") if actor.policy_loss is not None else "vanilla"
    zeros = torch.zeros(2, 3)
    get_policy_loss_fn(mode)(old_log_prob=zeros, log_prob=zeros, advantages=torch.ones(2, 3),
                             response_mask=torch.ones(2, 3), loss_agg_mode=actor.loss_agg_mode, config=actor)

def kl_controller(config_yaml):
    from verl.trainer.ppo.core_algos import get_kl_controller
    config = composed(config_yaml)
    assert config.algorithm.use_kl_in_reward  # the trainers build the controller only then
    return type(get_kl_controller(config.algorithm.kl_ctrl)).__name__

def kl_penalty(config_yaml):
    import torch
    from verl.trainer.ppo.core_algos import kl_penalty as penalty
    actor = composed(config_yaml).actor_rollout_ref.actor
    assert actor.use_kl_loss
    penalty(torch.zeros(2, 3), torch.zeros(2, 3), kl_penalty=actor.kl_loss_type)

def actor_dataclass(config_yaml):
    from verl.utils.config import omega_conf_to_dataclass
    omega_conf_to_dataclass(composed(config_yaml).actor_rollout_ref.actor)

def dapo_reward_manager(config_yaml):
    # the DAPO reward manager as each release's trainer builds it: the reward loop's (config.reward, 0.8+ core)
    # or the recipe's load_reward_manager kwargs (max_resp_len = data.max_response_length, reward_model.overlong_buffer)
    config = composed(config_yaml)
    if "reward" in config and config.reward.get("reward_manager", None) is not None:
        from verl.experimental.reward_loop.reward_manager.dapo import DAPORewardManager
        DAPORewardManager(config, tokenizer=None, compute_score=None)
    else:
        from verl.workers.reward_manager.dapo import DAPORewardManager
        DAPORewardManager(tokenizer=None, num_examine=0, max_resp_len=config.data.max_response_length,
                          overlong_buffer_cfg=config.reward_model.overlong_buffer)

def adv_estimator(config_yaml):
    from verl.trainer.ppo.core_algos import get_adv_estimator_fn
    return get_adv_estimator_fn(composed(config_yaml).algorithm.adv_estimator).__name__

def policy_loss_fn(config_yaml):
    from verl.trainer.ppo.core_algos import get_policy_loss_fn
    return get_policy_loss_fn(composed(config_yaml).actor_rollout_ref.actor.policy_loss.loss_mode).__name__

def megatron_validate(config_yaml):
    # MegatronPPOActor._validate_config on the actor config the legacy Megatron worker hands it
    fn = load_function(verl_file("workers/actor/megatron_actor.py"), "_validate_config", "MegatronPPOActor")
    class Self: pass
    fn(Self(), composed(config_yaml).actor_rollout_ref.actor)

def fsdp_optimizer_step(config_yaml):
    # DataParallelPPOActor._optimizer_step up to its first use of the optimizer
    fn = load_function(verl_file("workers/actor/dp_actor.py"), "_optimizer_step", "DataParallelPPOActor")
    class Self:
        def __getattr__(self, name): raise Reached()
    me = Self(); me.config = composed(config_yaml).actor_rollout_ref.actor
    fn(me)

def megatron_log_prob(config_yaml):
    # the legacy Megatron worker's compute_log_prob puts rollout.log_prob_* into meta_info (megatron_workers.py
    # data.meta_info[...] = self.config.rollout.log_prob_*), then MegatronPPOActor.compute_log_prob asserts
    import torch
    from verl.protocol import DataProto
    rollout = composed(config_yaml).actor_rollout_ref.rollout
    data = DataProto.from_dict({"input_ids": torch.zeros(2, 4)}, meta_info={
        "use_dynamic_bsz": rollout.log_prob_use_dynamic_bsz, "temperature": 1.0,
        "micro_batch_size": rollout.log_prob_micro_batch_size_per_gpu,
        "max_token_len": rollout.log_prob_max_token_len_per_gpu})
    fn = load_function(verl_file("workers/actor/megatron_actor.py"), "compute_log_prob", "MegatronPPOActor")
    class Self:
        actor_module = []
        def __getattr__(self, name): raise Reached()
    fn(Self(), data)

def tracking(backends):
    os.environ["VERL_FILE_LOGGER_ROOT"] = tempfile.mkdtemp()
    from verl.utils.tracking import Tracking
    Tracking(project_name="probe", experiment_name="probe", default_backend=backends)
'''
SCRIPT = PROBE.replace("\nresults = {}\n", LAYOUT_PROBES + HELDOUT_PROBES + V1_PAD + EXAMINER_PROBES + "\nresults = {}\n")
MCORE_PROBES = {"mcore_parallel"}


def refusals(flags: dict, model) -> list:
    """plan's errors for the layout: the spec's own (a value it cannot take) or the checks' and rules'."""
    from verl_deploy.findings import UserError

    try:
        return errors(planned(flags, model))
    except UserError as exc:
        return [f for f in exc.findings if f.level == "error"]


def verl_verdicts(models, tmp_path, layouts: dict) -> dict[str, bool | None]:
    """case -> does the real code run it (None: not reachable on CPU)."""
    probes: dict[str, dict] = defaultdict(dict)
    verdicts: dict[str, bool | None] = {}
    for name, (flags, model, _verdict, _where, ground) in layouts.items():
        if ground is None:
            verdicts[name] = None
            continue
        probe, kwargs = ground
        if CONFIG in kwargs.values():
            config = composed_yaml(planned(flags, models[model]), tmp_path, name)
            kwargs = {k: (config if v == CONFIG else v) for k, v in kwargs.items()}
        probes["mcore" if probe in MCORE_PROBES else flags["verl_version"]][name] = [probe, kwargs]
    for where, batch in probes.items():
        if where == "mcore":
            site = mcore_site()
            if site is None:
                pytest.skip("megatron-core 0.13.1 cannot be installed here")
            outcomes = run_probes(site, None, batch, SCRIPT)
        else:
            if realverl.verl_site(where) is None:
                pytest.skip(f"verl {where} cannot be installed here: {realverl.why_not(where)}")
            outcomes = run_probes(None, where, batch, SCRIPT)
        for name, outcome in outcomes.items():
            verdicts[name] = outcome["ok"]
            print(f"{name}: {outcome}")
    return verdicts


def test_examiner_layouts_are_refused_and_accepted_as_verl_does(models, tmp_path, capsys):
    verdicts = verl_verdicts(models, tmp_path, EXAMINER)
    rows, agree_plan, reachable, real_agrees = [], 0, 0, 0
    for name, (flags, model, verdict, _where, _ground) in EXAMINER.items():
        refused = refusals(flags, models[model])
        plan_right = bool(refused) == (verdict == "rejects")
        real = verdicts[name]
        agree_plan += plan_right
        reachable += real is not None
        real_agrees += real is not None and real == (verdict == "runs")
        rows.append((name, verdict, "refused" if refused else "accepted",
                     {None: "-", True: "runs", False: "rejects"}[real], [f.line() for f in refused][:1]))
        for finding in refused:
            assert finding.fix and "\n" not in finding.line(), finding
    with capsys.disabled():
        print(f"\nexaminer: plan agrees with verl on {agree_plan}/{len(EXAMINER)}; verl's own code ran {reachable} "
              f"of them on CPU and confirmed the written verdict on {real_agrees}")
    wrong = [row for row in rows if (row[1] == "rejects") != (row[2] == "refused") or row[3] not in ("-", row[1])]
    assert not wrong, "\n".join(map(str, wrong))
    assert reachable >= 49 and real_agrees == reachable


def _with_override(flags: dict, setting: str) -> dict:
    key = setting.split("=", 1)[0]
    kept = [o for o in flags.get("overrides", []) if o.split("=", 1)[0].lstrip("+") != key.lstrip("+")]
    return {**flags, "overrides": [*kept, setting]}


def test_the_override_a_refusal_names_is_one_plan_then_accepts(models):
    """Every refusal of an examiner layout whose fix is `--override KEY=VALUE`: with that override applied, the
    refusal is gone (the fix names a value verl takes, not just a different one)."""
    tried = 0
    for name, (flags, model, verdict, _where, _ground) in {**EXAMINER, **AFTER, **UNPROBED}.items():
        for finding in refusals(flags, models[model]):
            match = re.search(r"--override (\S+=[^\s,)]+)", finding.fix or "")
            if not match:
                continue
            tried += 1
            setting = match.group(1)
            after = [f.line() for f in refusals(_with_override(flags, setting), models[model])]
            assert finding.line() not in after and not any(setting.split("=")[0] in line for line in after), \
                (name, setting, after)
    assert tried >= 10


def test_the_layouts_written_after_the_measurement_agree_too(models, tmp_path):
    """AFTER (examiner_layouts.py): registry names and the FSDP optimizer's scheduler, written after the first
    measurement, and the checks the rule inventory listed last (0.7.0's engine workers, the legacy actors' grad_clip,
    shuffle seed and micro-batch settings); verl's own code runs every one of them here."""
    verdicts = verl_verdicts(models, tmp_path, AFTER)
    wrong = []
    for name, (flags, model, verdict, _where, _ground) in AFTER.items():
        refused = refusals(flags, models[model])
        if bool(refused) != (verdict == "rejects") or verdicts[name] != (verdict == "runs"):
            wrong.append((name, verdict, [f.line() for f in refused][:1], verdicts[name]))
    assert not wrong, "\n".join(map(str, wrong))


def test_the_checks_no_cpu_runs_are_refused_and_accepted_as_their_code_says(models):
    """UNPROBED (examiner_layouts.py): the Megatron engine's mbridge assert on 0.7.0's engine workers and the vLLM
    server's devices-per-node over TP; their code imports vLLM or builds process groups first, so plan is judged
    against the cited lines, and every refusal names a flag or an override."""
    wrong = []
    for name, (flags, model, verdict, _where, _ground) in UNPROBED.items():
        refused = refusals(flags, models[model])
        if bool(refused) != (verdict == "rejects"):
            wrong.append((name, verdict, [f.line() for f in refused][:2]))
        for finding in refused:
            assert finding.fix and ("--" in finding.fix), finding
    assert not wrong, "\n".join(map(str, wrong))
