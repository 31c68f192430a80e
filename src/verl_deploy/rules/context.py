"""What a runtime rule sees: the plan's resolved verl values, the model's facts, which code path runs.

Rules read the values the launch really sends (the profile's keys and the user's own `--override`s), so an
override that breaks an assertion is caught the same way. A rule names a *knob* (``mini_batch_size``,
``ulysses_sp``); the profile answers with the verl key of that knob for the release, framework and device
(profiles/base.py), so no rule spells a verl key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Mapping

import yaml

from verl_deploy.compiler import Plan
from verl_deploy.profiles.keytables import key_table
from verl_deploy.verl_release import release_numbers, release_of

release = release_numbers  # '0.9.1.dev' -> (0, 9, 1): rules compare releases with it
_UNSET = object()


def plan_values(plan: Plan) -> dict[str, Any]:
    """key -> value as verl receives it; a user's raw Hydra text is read as YAML (ints, floats, bools)."""
    values: dict[str, Any] = {}
    for override in plan.overrides:
        if override.prefix == "~":
            values.pop(override.key, None)
            continue
        value = override.value
        if override.raw is not None:
            try:
                value = yaml.safe_load(override.raw)
            except yaml.YAMLError:
                value = override.raw
        values[override.key] = value
    return values


class WrongType(Exception):
    """A value sent to verl is not of the type verl reads it as (`-o key=abc` where verl does int(...))."""

    def __init__(self, key: str, value: Any, expected: str):
        super().__init__(f"{key}={value!r} is not {expected}")
        self.key, self.value, self.expected = key, value, expected


@dataclass(frozen=True)
class RuleContext:
    plan: Plan
    values: Mapping[str, Any]
    facts: Any  # checks.Facts (not imported: checks imports this package)

    @property
    def spec(self):
        return self.plan.spec

    @property
    def version(self) -> tuple[int, int, int]:
        return release(self.spec.verl_version)

    @property
    def framework(self) -> str:
        return self.spec.framework

    # -- values, by knob: the profile names the key ---------------------------------------------
    def key(self, knob: str) -> str | None:
        """The verl key of `knob` on this release, framework and device (None: this launch has none)."""
        try:
            found = self.plan.profile.keys_for(knob, self.framework, self.spec.device, self.plan.mechanism)
        except KeyError:
            return None
        return found[0].path if found else None

    def default(self, knob: str, fallback: Any) -> Any:
        """verl's own default of the knob's key in this release's config (its key table), else `fallback`."""
        key = self.key(knob)
        table = key_table(release_of(self.spec.verl_version)) or {}
        value = table.get(key) if key else None
        return fallback if value is None else value

    def sent(self, knob: str) -> bool:
        """Does the launch send the knob's key (set by the profile or an --override)?"""
        key = self.key(knob)
        return key is not None and key in self.values

    def is_null(self, knob: str) -> bool:
        """The launch sends the knob's key as null (an --override clearing it)."""
        key = self.key(knob)
        return key is not None and key in self.values and self.values[key] is None

    def from_override(self, knob: str) -> bool:
        key = self.key(knob)
        return any(o.key == key and o.origin == "--override" for o in self.plan.overrides)

    def get(self, knob: str, default: Any = None) -> Any:
        key = self.key(knob)
        value = self.values.get(key, default) if key else default
        return default if value is None else value

    def number(self, knob: str, default: int) -> int:
        """An integer verl reads from the knob's key; a value that is not one is the user's mistake (WrongType)."""
        value = self.get(knob, default)
        key = self.key(knob) or knob
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise WrongType(key, value, "a whole number")
        try:
            number = float(value)
        except ValueError:
            raise WrongType(key, value, "a whole number") from None
        if number != number or number in (float("inf"), float("-inf")) or number != int(number):
            raise WrongType(key, value, "a whole number")
        return int(number)

    def real(self, knob: str, default: float) -> float:
        """A number verl reads from the knob's key (temperature, ratios)."""
        value = self.get(knob, default)
        if isinstance(value, bool) or not isinstance(value, (int, float, str)):
            raise WrongType(self.key(knob) or knob, value, "a number")
        try:
            return float(value)
        except ValueError:
            raise WrongType(self.key(knob) or knob, value, "a number") from None

    def flag(self, knob: str, default: bool = False) -> bool:
        value = self.get(knob, default)
        return value if isinstance(value, bool) else str(value).lower() == "true"

    # -- which code verl runs for this launch ------------------------------------------------
    @property
    def engine_workers(self) -> bool:
        """Which worker code trains. 0.8.0+: only the engine workers. 0.6.x: main_ppo and the recipes import the
        legacy fsdp_workers / megatron_workers for the actor. 0.7.0: so do the recipes, but main_ppo's TaskRunner
        takes engine_workers.ActorRolloutRefWorker with trainer.use_legacy_worker_impl=disable. 0.7.1: main_ppo
        picks by trainer.use_legacy_worker_impl (`auto` = legacy; one-step-off's yaml sets `disable`)."""
        if self.version >= (0, 8, 0):
            return True
        if self.version < (0, 7, 0):
            return False
        if self.version < (0, 7, 1):
            return (self.plan.entry_module == "verl.trainer.main_ppo"
                    and str(self.get("use_legacy_worker_impl", "auto")) == "disable")
        # one-step-off's and fully-async's yaml set `disable`
        default = "disable" if self.spec.mode in ("one-step-off", "fully-async") else "auto"
        return str(self.get("use_legacy_worker_impl", default)) == "disable"

    @property
    def uses_reference(self) -> bool:
        """Does the run build the reference policy (a KL loss or a KL penalty in the reward)?"""
        return self.flag("use_kl_loss") or self.flag("use_kl_in_reward")

    @property
    def v1(self) -> bool:
        """The run goes through verl 0.9's V1 trainer (main_ppo with trainer.use_v1): it pads each step's batch with
        no-op samples to a multiple of lcm(DP, mini-batch x n) before the actor sees it (v1/trainer_base.py
        _balance_batch, padding_utils.upsample_batch_to_divisible_size)."""
        return (self.version >= (0, 9, 0) and self.plan.entry_module == "verl.trainer.main_ppo"
                and self.flag("use_v1", True))

    @property
    def step_rows(self) -> int:
        """Rows (prompts x n) the actor's log-prob pass and update see in one step, padding included."""
        rows = self.step_batch * self.n
        if not self.v1:
            return rows
        multiple = math.lcm(self.dp, max(1, self.mini * self.n))
        return -(-rows // multiple) * multiple

    @property
    def validate_config_runs(self) -> bool:
        """verl.utils.config.validate_config: called by main_ppo, one-step-off and verl-recipe DAPO, but not by
        the in-tree recipe/dapo/main_dapo.py of 0.6.0-0.7.0."""
        return not (self.plan.mechanism == "dapo" and self.version <= (0, 7, 0))

    @property
    def trainer_world(self) -> int:
        return self.number("n_gpus_per_node", self.spec.trainer_devices) * self.number("nnodes", self.spec.nnodes)

    @property
    def tp(self) -> int:
        return self.number("train_tp", 1) if self.framework == "megatron" else 1

    @property
    def pp(self) -> int:
        return self.number("train_pp", 1) if self.framework == "megatron" else 1

    @property
    def cp(self) -> int:
        return self.number("train_cp", 1) if self.framework == "megatron" else 1

    @property
    def sp(self) -> int:
        """FSDP's Ulysses sequence parallel (1 for Megatron)."""
        if self.framework == "megatron":
            return 1
        return self.number("ulysses_sp", 1)

    @property
    def dp(self) -> int:
        """Data-parallel size of the actor: world / (TP x PP x CP) on Megatron, world / SP on FSDP."""
        return max(1, self.trainer_world // (self.tp * self.pp * self.cp * self.sp))

    @property
    def batch(self) -> int:
        return self.number("train_batch_size", self.spec.batch_size)

    @property
    def gen_batch(self) -> int:
        """Prompts a DAPO generation step draws (data.gen_batch_size; the train batch outside DAPO)."""
        if self.plan.mechanism != "dapo":  # main_ppo (GRPO), V1 (one prompt at a time), the split modes
            return self.batch
        return self.number("gen_batch_size", self.spec.effective_gen_batch_size)

    @property
    def step_batch(self) -> int:
        """Prompts one update trains on: DAPO with filter_groups off trains on the generation batch as it is
        (recipe/dapo/dapo_ray_trainer.py fit: `batch = new_batch`); otherwise the train batch."""
        if self.plan.mechanism == "dapo" and not self.flag("filter_groups_enable", self.spec.filter_groups):
            return self.gen_batch
        if self.v1 and str(self.get("trainer_mode", "sync")) == "separate_async":  # one mini-batch per local step
            return self.batch // max(1, self.number("parameter_sync_step", 1))
        return self.batch

    @property
    def mini(self) -> int:
        return self.number("mini_batch_size", self.spec.effective_mini_batch_size)

    @property
    def n(self) -> int:
        return self.number("rollout_n", self.spec.n_resp_per_prompt)

    @property
    def dynamic(self) -> bool:
        return self.flag("actor_use_dynamic_bsz")

    @property
    def sequence_length(self) -> int:
        return self.number("max_prompt_length", self.spec.max_prompt_length) + self.number(
            "max_response_length", self.spec.max_response_length)
