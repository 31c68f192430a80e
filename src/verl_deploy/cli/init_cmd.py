"""`verl-deploy init`: ask what could not be detected, write a commented config, optionally apply it."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, List, Optional

import typer

from verl_deploy.cli import app
from verl_deploy.cli.options import spec_options
from verl_deploy.sources import resolve
from verl_deploy.wizard.configfile import write_config

if TYPE_CHECKING:
    from verl_deploy.wizard.rounds import Wizard

EPILOG = """\
Examples:

  verl-deploy init                                  # probe, ask (Enter keeps the prefilled value), write verl-deploy.yaml

  verl-deploy init --config runs/qwen3.yaml --apply # ... then confirm and write the scripts

Rounds: 1 basics (nodes, devices, model, data, checkpoints, mode, framework) · 2 container ·
3 proxy (for a new container, or when there is no network) · 4 SwanLab · 5 features (default,
a checklist, or a 7-bit mask decoded as you type) · 6 hyper-parameters (checked as typed).
Values set in the environment (SWANLAB_HOST, TRAIN_STEPS, ...) are not asked again. The SwanLab
API key is kept in a 0600 file, never in the config.

Everything init asks can be given as flags to plan, generate and launch instead (for scripts
and agents: see skills/verl-deploy/SKILL.md).
"""


@app.command("init", epilog=EPILOG)
@spec_options
def init_command(
    search_root: Optional[List[str]] = typer.Option(None, "--search-root", metavar="DIR",
                                                    help="Where to look for models and datasets (repeatable)."),
    force: bool = typer.Option(False, "--force", help="Overwrite the config file without asking."),
    apply: bool = typer.Option(False, "--apply", help="After writing the config: confirm, then write the scripts."),
    output_dir: str = typer.Option("./verl_scripts", "--output-dir", help="With --apply: where the scripts go."),
    yes: bool = typer.Option(False, "--yes", "-y", help="With --apply: do not ask for confirmation."),
    **options: Any,
) -> None:
    """Ask the questions of the seeds' rounds, prefilled with what was detected, and write a config file."""
    from verl_deploy.cli.output import console, fail
    from verl_deploy.findings import UserError, error
    from verl_deploy.secrets import save_swanlab_key

    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise fail([error("init", "needs a terminal to ask its questions",
                          "give the values as flags to plan/generate/launch, or write a config file (--config)")])
    config_path = Path(options.get("config") or "verl-deploy.yaml")
    config_file = str(config_path) if config_path.exists() else None
    try:
        flags, result = _probe(options, config_file, search_root)
    except UserError as exc:
        raise fail(exc.findings) from None
    wizard, answers = _ask(result)
    existing = _read_existing(config_path, config_file)
    values = _to_write(result, answers, existing is not None, config_file)
    try:
        resolve(flags=flags, environ=os.environ, config_file=config_file,
                answers={k: v for k, v in values.items() if v is not None})  # valid?
    except UserError as exc:
        raise fail(exc.findings) from None
    _overwrite_asked(config_path, force)
    written = _write(config_path, values, existing)
    if wizard.swanlab_key:
        console(stderr=True).print(f"[dim]SwanLab key kept in {save_swanlab_key(wizard.swanlab_key)} (mode 0600)[/]")
    console().print(f"wrote [bold]{written}[/] — next: verl-deploy plan --config {written}")
    if apply:
        _apply(spec_config=str(written), flags=flags, output_dir=output_dir, yes=yes)


def _probe(options: dict[str, Any], config_file: str | None, search_root: list[str] | None):
    """(the flags, what `check` found here): the questions are prefilled with it; the detected facts are kept."""
    from rich.markup import escape

    from verl_deploy.cli.options import flags_from
    from verl_deploy.cli.output import console
    from verl_deploy.cli.run_common import check_with
    from verl_deploy.preflight.saved import save_detected

    err = console(stderr=True)
    flags, _ = flags_from(options)
    with err.status("probing this host (verl-deploy check)…"):
        result = check_with(flags, config_file, search_roots=search_root)
    save_detected(result.detected, given=result.given_fields())
    err.print(f"[dim]found: {result.verdict()}[/]")
    for finding in [f for f in result.findings if f.level == "error"]:  # which ones: the questions may fix them
        err.print(f"[dim]  error: {escape(finding.field)}: {escape(finding.message[:200])}[/]", soft_wrap=True)
    return flags, result


def _ask(result) -> tuple[Wizard, dict[str, Any]]:
    """The rounds, on the spec check resolved; Ctrl-C or Ctrl-D stops with nothing written."""
    from verl_deploy.cli.output import console
    from verl_deploy.wizard.rounds import Wizard  # questionary: imported when init asks, not for --help

    err = console(stderr=True)
    found = {area_id: area.data for area_id, area in result.areas.items()}
    wizard = Wizard(result.spec, found, say=lambda text: err.print(f"[bold]{text}[/]" if text.startswith("Round")
                                                                    else f"[dim]{text}[/]"))
    try:
        return wizard, wizard.run()
    except (KeyboardInterrupt, EOFError):
        err.print("stopped: nothing was written")
        raise typer.Exit(code=130) from None


def _to_write(result, answers: dict[str, Any], updating: bool, config_file: str | None) -> dict[str, Any]:
    """A new file: what was detected and answered. An existing one: only the answers that differ from what the
    file said or that it lacks (detected facts stay in detected.json, not in the user's file)."""
    if not updating:
        return {**result.detected, **answers}
    in_file = {name for name, source in result.spec.sources.items() if source == f"file {config_file}"}
    return {k: v for k, v in answers.items() if k not in in_file or v != getattr(result.spec, k)}


def _overwrite_asked(config_path: Path, force: bool) -> None:
    """An existing file is replaced (updated) only after a yes, or with --force."""
    import questionary

    from verl_deploy.cli.output import console

    if config_path.exists() and not force:
        if not questionary.confirm(f"{config_path} exists. Overwrite it?", default=True).unsafe_ask():
            console(stderr=True).print("stopped: nothing was written")
            raise typer.Exit(code=1)


def _write(config_path: Path, values: dict[str, Any], existing: str | None) -> Path:
    from ruamel.yaml.error import YAMLError

    from verl_deploy.cli.output import fail
    from verl_deploy.findings import error

    try:
        kept = values if existing is not None else {k: v for k, v in values.items() if v is not None or k == "container"}
        return write_config(config_path, kept, existing=existing)
    except (ValueError, YAMLError, OSError) as exc:
        raise fail([error("config", f"cannot update {config_path}: {exc}", "fix the file, or write a new one with "
                          "`verl-deploy init --config NEW.yaml`")]) from None


def _read_existing(config_path: Path, config_file: str | None) -> str | None:
    """The config file's text, to update in place (None: write a new one)."""
    if config_file is None:
        return None
    try:
        return config_path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return None


def _apply(*, spec_config: str, flags: dict, output_dir: str, yes: bool) -> None:
    from verl_deploy.cli.confirm import confirm
    from verl_deploy.cli.output import console, fail
    from verl_deploy.cli.run_common import prepare_from_flags
    from verl_deploy.findings import Finding
    from verl_deploy.render import plan_document, write_outputs

    prepared = prepare_from_flags(flags, spec_config)
    if not prepared.ok or prepared.plan is None:
        raise fail(prepared.findings)
    confirm(prepared, f"write the scripts to {output_dir}", yes=yes)
    document = plan_document(prepared.plan, prepared.findings, prepared.checked_against)
    written = write_outputs(prepared.plan, Path(output_dir), document, force=True)
    if isinstance(written, Finding):
        raise fail([written])
    console().print(f"wrote {', '.join(written.files)} to [bold]{written.directory}[/]")
