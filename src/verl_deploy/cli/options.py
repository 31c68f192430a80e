"""The options shared by every command that builds a run (plan, generate, launch, ...).

Declared once here and added to each command's signature by ``spec_options``, so a flag
is spelled in one place. ``flags_from`` turns the parsed options into the `flags` layer
of the sources (only the options the user actually gave).
"""

from __future__ import annotations

import functools
import inspect
import sys
import typing
from typing import Any, Callable, List, Optional

import typer

from verl_deploy import boundedread
from verl_deploy.findings import UserError, error
from verl_deploy.secrets import MAX_KEY_BYTES

P = inspect.Parameter


def _opt(*names: str, help: str, **kw: Any) -> Any:
    return typer.Option(None, *names, help=help, show_default=False, **kw)


# (parameter name, annotation, typer option). The name is the RunSpec field unless noted.
SPEC_OPTIONS: list[tuple[str, Any, Any]] = [
    ("config", Optional[str], _opt("--config", "-c", help="YAML config file of spec fields (see `verl-deploy init`).",
                                   rich_help_panel="Input")),
    ("mode", Optional[str], _opt("--mode", help="dapo (colocated, sync; every release) | one-step-off (separate "
                                 "trainer/rollout devices; every release) | colocate-async | separate-async (verl "
                                 "0.9.0+, the V1 trainer). `verl-deploy features` lists them per release.",
                                 rich_help_panel="Run")),
    ("algorithm", Optional[str], _opt("--algorithm", help="dapo (default) | grpo (as verl's GRPO example scripts: "
                                      "KL loss, symmetric clip, no dynamic sampling or overlong buffer).",
                                      rich_help_panel="Run")),
    ("dapo_source", Optional[str], _opt("--dapo-source", help="verl 0.9.0+: core (verl.trainer.main_ppo, V1 trainer) "
                                        "(default) | recipe (the verl-recipe DAPO trainer).", rich_help_panel="Run")),
    ("parameter_sync_step", Optional[int], _opt("--parameter-sync-step", help="separate-async: mini-batches between "
                                                "weight syncs (default: batch / mini-batch).", rich_help_panel="Run")),
    ("warmup_batches", Optional[int], _opt("--warmup-batches", help="colocate-/separate-async: batches queued before "
                                           "training (default 1).", rich_help_panel="Run")),
    ("max_off_policy", Optional[int], _opt("--max-off-policy", help="V1 async: model versions a trajectory may span "
                                           "(default 8).", rich_help_panel="Run")),
    ("off_policy_strategy", Optional[str], _opt("--off-policy-strategy", help="V1 async: drop (default) | wait.",
                                                rich_help_panel="Run")),
    ("framework", Optional[str], _opt("--framework", help="megatron (default) | fsdp.", rich_help_panel="Run")),
    ("device", Optional[str], _opt("--device", help="npu (default) | gpu.", rich_help_panel="Run")),
    ("npu_type", Optional[str], _opt("--npu-type", help="a2 (910B, default) | a3: which official image (check "
                                     "detects it).", rich_help_panel="Run")),
    ("verl_version", Optional[str], _opt("--verl-version", help="Target verl version (default: read from --verl-dir / --run-dir when given, else 0.7.0).",
                                         rich_help_panel="Run")),
    ("verl_dir", Optional[str], _opt("--verl-dir", help="A verl checkout on this host: version and configs are read from it.",
                                     rich_help_panel="Run")),
    ("nearest_profile", Optional[bool], _opt("--nearest-profile", help="Plan a verl release this tool has no profile "
                                             "for (e.g. a main checkout, 0.10.0.dev) with the newest older profile; "
                                             "verl's own validation then runs.", rich_help_panel="Run")),
    ("run_dir", Optional[str], _opt("--run-dir", help="verl source root where training runs (default /verl).",
                                    rich_help_panel="Run")),
    ("model_path", Optional[str], _opt("--model-path", help="HuggingFace model directory.", rich_help_panel="Paths")),
    ("train_file", Optional[str], _opt("--train-file", help="Training parquet.", rich_help_panel="Paths")),
    ("test_file", Optional[str], _opt("--test-file", "--val-file", help="Validation parquet.", rich_help_panel="Paths")),
    ("ckpts_dir", Optional[str], _opt("--ckpts-dir", help="Checkpoint directory.", rich_help_panel="Paths")),
    ("devices", Optional[str], _opt("--devices", "--npu-devices", help="Device ids, e.g. 0,1,2,3 or 0-7.",
                                    rich_help_panel="Hardware")),
    ("nnodes", Optional[int], _opt("--nnodes", help="Number of nodes.", rich_help_panel="Hardware")),
    ("nodes", Optional[str], _opt("--nodes", help="Hosts of a multi-node run, head first: h1,h2 or @hostfile (SSH "
                                  "names; launch starts the workers over SSH).", rich_help_panel="Hardware")),
    ("master_addr", Optional[str], _opt("--master-addr", help="Address of the Ray head.", rich_help_panel="Hardware")),
    ("ray_auth", Optional[str], _opt("--ray-auth", help="token | disabled: Ray token authentication for the Ray the "
                                     "scripts start and join (default: RAY_AUTH_MODE, else token when a Ray token "
                                     "is found: RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH, ~/.ray/auth_token).",
                                     rich_help_panel="Hardware")),
    ("socket_ifname", Optional[str], _opt("--socket-ifname", help="Network interface for HCCL/NCCL/GLOO.",
                                          rich_help_panel="Hardware")),
    ("container", Optional[str], _opt("--container", help="Container the run uses.", rich_help_panel="Hardware")),
    ("image", Optional[str], _opt("--image", help="Image for a new container (default: the official image of the "
                                  "verl version and device, see README 'Official images').",
                                  rich_help_panel="Hardware")),
    ("image_file", Optional[str], _opt("--image-file", help="Image tarball (`docker save` output) loaded with "
                                       "`docker load` when the image is not on this host: no registry needed.",
                                       rich_help_panel="Hardware")),
    ("pull_timeout", Optional[int], _opt("--pull-timeout", help="Seconds a `docker pull` may take (default 1800).",
                                         rich_help_panel="Hardware")),
    ("mount", Optional[List[str]], _opt("--mount", help="Extra bind for a new container, HOST:CONTAINER[:ro]; "
                                        "repeatable (data, models, code).", rich_help_panel="Hardware")),
    ("http_proxy", Optional[str], _opt("--http-proxy", help="Proxy for a new container and pip in it.",
                                       rich_help_panel="Hardware")),
    ("https_proxy", Optional[str], _opt("--https-proxy", help="HTTPS proxy for a new container and pip in it.",
                                        rich_help_panel="Hardware")),
    ("device_memory_gb", Optional[float], _opt("--device-memory-gb", help="Memory of one device in GiB for the "
                                               "memory estimate (default: what check found, else the device "
                                               "name's default, e.g. 64 for 910B3, 80 for H100).",
                                               rich_help_panel="Hardware")),
    ("device_name", Optional[str], _opt("--device-name", help="Accelerator model for the memory estimate's "
                                        "default memory when none is detected: 910B1-910B4, A3, H100, H800, H20, "
                                        "H200, A100-40GB, A100, A800, L20, RTX 4090, RTX A6000.",
                                        rich_help_panel="Hardware")),
    ("trainer_gpus", Optional[int], _opt("--trainer-gpus", help="one-step-off, separate-async, fully-async: trainer devices (default 4).",
                                         rich_help_panel="Hardware")),
    ("rollout_gpus", Optional[int], _opt("--rollout-gpus", help="one-step-off, separate-async, fully-async: rollout devices (default 4).",
                                         rich_help_panel="Hardware")),
    ("train_steps", Optional[int], _opt("--train-steps", help="Training steps (default 100).",
                                        rich_help_panel="Hyper-parameters")),
    ("batch_size", Optional[int], _opt("--batch-size", help="Prompts per step (default 32).",
                                       rich_help_panel="Hyper-parameters")),
    ("mini_batch_size", Optional[int], _opt("--mini-batch-size", help="PPO mini-batch (default = batch size).",
                                            rich_help_panel="Hyper-parameters")),
    ("gen_batch_size", Optional[int], _opt("--gen-batch-size", help="DAPO generation batch (default 3 x batch).",
                                           rich_help_panel="Hyper-parameters")),
    ("lr", Optional[float], _opt("--lr", help="Learning rate (default 1e-6).", rich_help_panel="Hyper-parameters")),
    ("n_resp_per_prompt", Optional[int], _opt("--n-resp-per-prompt", help="Responses per prompt (default 8).",
                                              rich_help_panel="Hyper-parameters")),
    ("max_prompt_length", Optional[int], _opt("--max-prompt-length", help="Default 2048.",
                                              rich_help_panel="Hyper-parameters")),
    ("max_response_length", Optional[int], _opt("--max-response-length", help="Default 8192.",
                                                rich_help_panel="Hyper-parameters")),
    ("save_freq", Optional[int], _opt("--save-freq", help="Checkpoint every N steps (default 10; 0 or -1 off).",
                                      rich_help_panel="Hyper-parameters")),
    ("test_freq", Optional[int], _opt("--test-freq", help="Validate every N steps (default 10; 0 or -1 off).",
                                      rich_help_panel="Hyper-parameters")),
    ("val_before_train", Optional[str], _opt("--val-before-train", help="yes | no: validate before the first step "
                                             "(default no).", rich_help_panel="Hyper-parameters")),
    ("max_ckpt_to_keep", Optional[int], _opt("--max-ckpt-to-keep", help="Checkpoints kept (default 2).",
                                             rich_help_panel="Hyper-parameters")),
    ("temperature", Optional[float], _opt("--temperature", help="Rollout sampling temperature (default 1.0).",
                                          rich_help_panel="Hyper-parameters")),
    ("clip_ratio_low", Optional[float], _opt("--clip-ratio-low", help="PPO clip below (default 0.2).",
                                             rich_help_panel="Hyper-parameters")),
    ("clip_ratio_high", Optional[float], _opt("--clip-ratio-high", help="PPO clip above, DAPO's clip-higher "
                                              "(default 0.28).", rich_help_panel="Hyper-parameters")),
    ("loss_agg_mode", Optional[str], _opt("--loss-agg-mode", help="token-mean (default) | seq-mean-token-sum | "
                                          "seq-mean-token-mean | seq-mean-token-sum-norm | token-sum (verl 0.9.0+).",
                                          rich_help_panel="Hyper-parameters")),
    ("filter_groups", Optional[str], _opt("--filter-groups", help="yes | no: DAPO's dynamic sampling, drop groups "
                                          "whose responses all score alike (default yes).",
                                          rich_help_panel="Hyper-parameters")),
    ("filter_groups_metric", Optional[str], _opt("--filter-groups-metric", help="Metric the groups are filtered on "
                                                 "(default acc).", rich_help_panel="Hyper-parameters")),
    ("max_num_gen_batches", Optional[int], _opt("--max-num-gen-batches", help="Generation batches a step may take "
                                                "to fill the train batch (default 10; 0 no limit).",
                                                rich_help_panel="Hyper-parameters")),
    ("overlong_buffer", Optional[str], _opt("--overlong-buffer", help="yes | no: DAPO's overlong penalty (default yes).",
                                            rich_help_panel="Hyper-parameters")),
    ("overlong_buffer_len", Optional[int], _opt("--overlong-buffer-len", help="Tokens before the maximum where the "
                                                "penalty starts (default: a quarter of the response length).",
                                                rich_help_panel="Hyper-parameters")),
    ("overlong_penalty_factor", Optional[float], _opt("--overlong-penalty-factor", help="Penalty at the maximum "
                                                      "length (default 1.0).", rich_help_panel="Hyper-parameters")),
    ("rollout_engine", Optional[str], _opt("--rollout-engine", help="vllm (default) | sglang.",
                                           rich_help_panel="Hyper-parameters")),
    ("gpu_memory_utilization", Optional[float], _opt("--gpu-memory-utilization", help="Share of device memory the "
                                                     "rollout engine takes (default 0.6).",
                                                     rich_help_panel="Hyper-parameters")),
    ("train_tp", Optional[int], _opt("--train-tp", help="Training tensor parallel (default 4).",
                                     rich_help_panel="Parallelism")),
    ("train_pp", Optional[int], _opt("--train-pp", help="Training pipeline parallel (default 2).",
                                     rich_help_panel="Parallelism")),
    ("train_cp", Optional[int], _opt("--train-cp", help="Training context parallel (default 1).",
                                     rich_help_panel="Parallelism")),
    ("gen_tp", Optional[int], _opt("--gen-tp", help="Rollout tensor parallel (default = train TP).",
                                   rich_help_panel="Parallelism")),
    ("allow_tp_mismatch", Optional[bool], _opt("--allow-tp-mismatch", help="Allow --gen-tp to differ from --train-tp.",
                                               rich_help_panel="Parallelism")),
    ("mask", Optional[str], _opt("--mask", help="7-bit feature mask RmvPad DynBSZ Offload PfxCache Recompute SwapOpt "
                                 "VPP, leftmost = bit 0, e.g. 1100000.", rich_help_panel="Features")),
    ("features", Optional[str], _opt("--features", help="Features to turn on, comma separated; -name turns one off.",
                                     rich_help_panel="Features")),
    ("no_default_features", Optional[bool], _opt("--no-default-features", help="Start with every feature off.",
                                                 rich_help_panel="Features")),
    ("recompute_method", Optional[str], _opt("--recompute-method", help="block (default) | uniform: how the "
                                             "recompute feature recomputes (Megatron).", rich_help_panel="Features")),
    ("recompute_num_layers", Optional[int], _opt("--recompute-num-layers", help="Layers the recompute feature "
                                                 "recomputes: per stage (block) or per chunk (uniform); default 8.",
                                                 rich_help_panel="Features")),
    ("max_oom_retries", Optional[int], _opt("--max-oom-retries", help="OOM retries with memory features (default 2).",
                                            rich_help_panel="Features")),
    ("swanlab", Optional[str], _opt("--swanlab", help="yes | no: log to SwanLab (default: yes when a host is set).",
                                    rich_help_panel="SwanLab")),
    ("swanlab_host", Optional[str], _opt("--swanlab-host", help="e.g. http://10.0.0.1:8000.", rich_help_panel="SwanLab")),
    ("swanlab_api_key", Optional[str], _opt("--swanlab-api-key", help="'-' reads it from stdin (preferred: "
                                            "SWANLAB_API_KEY in the environment; argv is visible to other users).",
                                            rich_help_panel="SwanLab")),
    ("swanlab_mode", Optional[str], _opt("--swanlab-mode", help="cloud (default) | local.", rich_help_panel="SwanLab")),
    ("swanlab_workspace", Optional[str], _opt("--swanlab-workspace", help="Default TrainingMaster.",
                                              rich_help_panel="SwanLab")),
    ("swanlab_log_dir", Optional[str], _opt("--swanlab-log-dir", help="SwanLab log directory.", rich_help_panel="SwanLab")),
    ("logger", Optional[str], _opt("--logger", help="Trackers verl logs to, comma separated: console, wandb, "
                                   "swanlab, mlflow, tensorboard, clearml, vemlp_wandb (default console, + swanlab "
                                   "when on). Credentials come from the environment or trackers.env, never flags.",
                                   rich_help_panel="SwanLab")),
    ("project_name", Optional[str], _opt("--project-name", help="Default verl_hlm.", rich_help_panel="SwanLab")),
    ("experiment_name", Optional[str], _opt("--experiment-name", help="Default <mode>-<model>-<framework>-<device>.",
                                            rich_help_panel="SwanLab")),
    ("override", Optional[List[str]], _opt("--override", "-o", help="Any verl key, Hydra syntax: KEY=VALUE "
                                           "(repeatable; checked against verl's config).", rich_help_panel="Input")),
    ("strict", Optional[bool], _opt("--strict", help="Missing paths and unchecked overrides are errors.",
                                    rich_help_panel="Input")),
    ("ignore_detected", Optional[bool], _opt("--ignore-detected", help="Do not start from the values `verl-deploy "
                                             "check` found on this host.", rich_help_panel="Input")),
]
SPEC_OPTION_NAMES = {name for name, _, _ in SPEC_OPTIONS}
YES_NO_OPTIONS = {"swanlab", "val_before_train", "filter_groups", "overlong_buffer"}  # `--flag yes|no` (default on)


def spec_options(func: Callable, only: tuple[str, ...] | None = None) -> Callable:
    """Add the shared spec options to a command; the command receives them in **kwargs."""
    hints = typing.get_type_hints(func)  # the command module's own names, not ours
    own = [p.replace(annotation=hints.get(p.name, p.annotation))
           for p in inspect.signature(func).parameters.values() if p.kind is not P.VAR_KEYWORD]
    shared = [P(name, P.KEYWORD_ONLY, default=option, annotation=annotation) for name, annotation, option in SPEC_OPTIONS
              if only is None or name in only]

    @functools.wraps(func)
    def wrapper(**kwargs: Any) -> Any:
        return func(**kwargs)

    params = [p.replace(kind=P.KEYWORD_ONLY) for p in own] + shared
    wrapper.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    wrapper.__annotations__ = {p.name: p.annotation for p in params}
    del wrapper.__wrapped__  # typer must read our signature, not the original's
    return wrapper


def some_spec_options(*names: str) -> Callable[[Callable], Callable]:
    """Only these shared options (a command that needs a few, e.g. `swanlab login`, lists only its own)."""
    unknown = set(names) - SPEC_OPTION_NAMES
    assert not unknown, unknown
    return lambda func: spec_options(func, only=names)


def flags_from(options: dict[str, Any]) -> tuple[dict[str, Any], str | None]:
    """The `flags` layer for sources.resolve, and the --config path."""
    flags: dict[str, Any] = {}
    for name in SPEC_OPTION_NAMES - {"config", "override", "ignore_detected", "mount"}:
        value = options.get(name)
        if value is None or value is False:
            continue
        flags[name] = value
    if options.get("mount"):
        flags["mounts"] = list(options["mount"])
    if options.get("override"):
        flags["overrides"] = list(options["override"])
    for name in YES_NO_OPTIONS & set(flags):
        answer = str(flags[name]).strip().lower()
        flag = "--" + name.replace("_", "-")
        if answer not in {"yes", "no", "true", "false", "on", "off", "1", "0", "y", "n"}:
            raise UserError([error(name, f"{str(flags[name])[:40]!r} is not yes or no", f"pass {flag} yes or {flag} no")])
        flags[name] = answer in {"yes", "true", "on", "1", "y"}
    if flags.get("swanlab_api_key") == "-":
        try:
            key = boundedread.read_line(sys.stdin, MAX_KEY_BYTES, "the key on stdin").strip()
        except boundedread.UnreadableFile as exc:
            raise UserError([error("swanlab_api_key", str(exc),
                                   "pipe one line with the key: echo $KEY | verl-deploy ... --swanlab-api-key -")]) from None
        if not key:
            raise UserError([error("swanlab_api_key", "no key on stdin", "pipe the key: echo $KEY | verl-deploy ... --swanlab-api-key -")])
        flags["swanlab_api_key"] = key
    return flags, options.get("config")
