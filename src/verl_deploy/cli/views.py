"""Rich views of a prepared plan: configuration with sources, features, findings, command."""

from __future__ import annotations

from verl_deploy.cli.output import console, print_findings
from verl_deploy.pipeline import Prepared
from verl_deploy.secrets import mask_secret

SECTIONS: list[tuple[str, tuple[str, ...]]] = [
    ("Run", ("mode", "framework", "device", "npu_type", "verl_version", "verl_dir", "run_dir", "container", "image", "http_proxy",
             "https_proxy")),
    ("Paths", ("model_path", "train_file", "test_file", "ckpts_dir", "prompt_key")),
    ("Hardware", ("devices", "nnodes", "nodes", "master_addr", "head_from_scheduler", "ray_port", "ray_auth", "socket_ifname", "trainer_gpus", "rollout_gpus",
                  "device_name", "device_memory_gb", "host_memory_gb")),
    ("Hyper-parameters", ("train_steps", "batch_size", "mini_batch_size", "gen_batch_size", "lr", "n_resp_per_prompt",
                          "max_prompt_length", "max_response_length", "temperature", "clip_ratio_low",
                          "clip_ratio_high", "loss_agg_mode", "filter_groups", "filter_groups_metric",
                          "max_num_gen_batches", "overlong_buffer", "overlong_buffer_len", "overlong_penalty_factor",
                          "save_freq", "test_freq", "val_before_train", "max_ckpt_to_keep")),
    ("Parallelism", ("train_tp", "train_pp", "train_cp", "gen_tp", "allow_tp_mismatch", "rollout_engine",
                     "gpu_memory_utilization")),
    ("Features", ("mask", "features", "recompute_method", "recompute_num_layers", "no_default_features",
                  "estimate_features", "oom_features", "max_oom_retries")),
    ("Logging", ("logger", "swanlab", "swanlab_host", "swanlab_api_key", "swanlab_mode", "swanlab_workspace",
                 "swanlab_log_dir", "project_name", "experiment_name")),
    ("Extra", ("overrides", "strict", "nearest_profile")),
]


def shown_value(prepared: Prepared, name: str) -> tuple[str, str]:
    """(value, source) for display; derived values show what they were derived as."""
    spec = prepared.spec
    source = spec.sources.get(name, "default")
    value = getattr(spec, name)
    derived = {
        "ckpts_dir": spec.effective_ckpts_dir, "mini_batch_size": spec.effective_mini_batch_size,
        "gen_batch_size": spec.effective_gen_batch_size, "gen_tp": spec.rollout_tp,
        "experiment_name": spec.effective_experiment_name, "swanlab": spec.swanlab_on,
        "overlong_buffer_len": spec.effective_overlong_buffer_len,
        "swanlab_log_dir": spec.effective_swanlab_log_dir,
    }
    if value is None and name in derived:
        value, source = derived[name], "derived"
    if name == "logger" and value != spec.loggers:  # what verl's trainer.logger gets (console, + swanlab when on)
        value, source = spec.loggers, source if value else "derived"
    if name == "swanlab_api_key" and value is not None:
        value = mask_secret(value.get_secret_value())
    if isinstance(value, list):
        value = ",".join(str(v) for v in value) if value else "—"
    if value is None:
        value = "—"
    replaced_by = prepared.plan.superseded.get(name) if prepared.plan is not None else None
    if replaced_by is not None:  # verl receives the override, not the field: say so where the field is shown
        return f"{replaced_by} (instead of {value})", "flag --override"
    return str(value), source


# The values that decide a run, besides the header's mode, framework, device and verl release: `plan` shows
# these and whatever was set or detected; `plan --all`, every field.
DECIDING = frozenset({
    "device_name", "run_dir", "container", "image", "model_path", "train_file", "test_file", "ckpts_dir", "devices",
    "nnodes", "train_steps", "batch_size", "gen_batch_size", "n_resp_per_prompt", "max_prompt_length",
    "max_response_length", "lr", "train_tp", "train_pp", "gen_tp", "rollout_engine", "gpu_memory_utilization",
    "logger", "experiment_name"})


def shown_fields(prepared: Prepared, everything: bool) -> list[tuple[str, str, str, str]]:
    """(section, field, value, source) rows: every field, or the deciding ones plus every one not left at its
    default (a derived value is shown only where it decides the run)."""
    rows = []
    for title, names in SECTIONS:
        for name in names:
            value, source = shown_value(prepared, name)
            if everything or source not in ("default", "derived") or (name in DECIDING and value != "—"):
                rows.append((title, name, value, source))
    return rows


def show_plan(prepared: Prepared, everything: bool = False) -> None:
    """The plan for people. By default what fits a screen: the deciding values and whatever was set, the
    features that are on, the memory per phase, the command's first line, the findings;
    with `everything` (`plan --all`) every field, every feature, each memory term and the whole command."""
    from rich.markup import escape
    from rich.table import Table

    out = console()
    plan = prepared.plan
    spec = prepared.spec
    assert plan is not None
    kind = f" {spec.npu_type}" if spec.device == "npu" else ""
    out.print(f"[bold]verl-deploy plan[/]: {spec.mode} · {spec.framework} · {len(spec.devices)} "
              f"{spec.device.upper()}{kind} · verl {spec.verl_version} (profile {plan.profile.name})")
    table = Table(show_header=True, header_style="bold", box=None, pad_edge=False)
    table.add_column("field")
    table.add_column("value", overflow="fold")
    table.add_column("source", style="dim")
    last_section = None
    for title, name, value, source in shown_fields(prepared, everything):
        cell = f"[green]{escape(value)}[/]" if source != "default" else escape(value)
        if everything and title != last_section:
            table.add_row(f"[bold underline]{title}[/]", "", "")
        table.add_row(name, cell, escape(source))
        last_section = title
    out.print(table)

    from verl_deploy.features import BY_NAME

    if everything:
        features = Table(title=f"features (mask {plan.mask})", box=None, header_style="bold", title_justify="left")
        for column in ("feature", "bit", "kind", "state", "why"):
            features.add_column(column)
        for state in plan.features:
            feature = BY_NAME[state.name]
            mark = "[green]on[/]" if state.on else "off"
            features.add_row(state.name, "" if feature.bit is None else str(feature.bit), feature.kind, mark, state.why)
        out.print(features)
    else:
        on = [s.name + ("" if s.why == "default" else f" ({s.why})") for s in plan.features if s.on]
        off = [s.name for s in plan.features if not s.on and BY_NAME[s.name].kind == "memory"]
        out.print(f"[bold]features[/] (mask {plan.mask}): on " + escape(", ".join(on) or "none") +
                  ("; memory features off: " + ", ".join(off) if off else ""), soft_wrap=True)
    from verl_deploy.cli.memory_view import show_memory

    show_memory(prepared, everything=everything)

    if everything:
        out.print("[bold]command[/] (run from " + escape(spec.run_dir) + "):")
        out.print("python3 " + " ".join(plan.argv()[:3]) + " \\", soft_wrap=True, markup=False)
        for override in plan.overrides:
            out.print("    " + override.text() + " \\", soft_wrap=True, markup=False)
    else:
        out.print(f"[bold]command[/] (run from {escape(spec.run_dir)}): python3 " + escape(" ".join(plan.argv()[:3])) +
                  f" + {len(plan.overrides)} overrides", soft_wrap=True)
    if prepared.checked_against:
        out.print(f"[dim]overrides checked against {escape(prepared.checked_against)}[/]", soft_wrap=True)
    if prepared.findings:
        print_findings(prepared.findings, stderr=False)
    errors = sum(f.level == "error" for f in prepared.findings)
    warnings = sum(f.level == "warning" for f in prepared.findings)
    verdict = "[bold red]not ready[/]" if errors else "[bold green]ready[/]"
    out.print(f"{verdict}: {errors} error(s), {warnings} warning(s)" +
              ("" if everything else " [dim]· plan --all: every field, feature, memory term and override[/]"))
