"""`verl-deploy swanlab login`: install, log in and verify SwanLab where the training runs."""

from __future__ import annotations

import os
import sys
from typing import Any

import typer

from verl_deploy.cli import app
from verl_deploy.cli.options import some_spec_options

swanlab_app = typer.Typer(help="SwanLab: log in where the training runs (the key never on a command line).",
                          no_args_is_help=True)
app.add_typer(swanlab_app, name="swanlab")

EPILOG = """\
Examples:

  SWANLAB_API_KEY=... verl-deploy swanlab login --swanlab-host http://10.0.0.1:8000 --container verl-npu

  verl-deploy swanlab login            # asks for the key (hidden) and remembers it in a 0600 file

  verl-deploy swanlab login --install-missing   # swanlab not there yet: install the pinned version first

Where the key comes from: SWANLAB_API_KEY, else the key remembered by `init` or an earlier login
(~/.config/verl-deploy/swanlab_api_key, mode 0600), else a hidden prompt. It reaches swanlab's own
login (`swanlab.login`, run by the python3 the training uses) on standard input only. A missing
swanlab is installed (pinned) only with --install-missing or a yes at the prompt.
"""


def resolve_key(spec, *, interactive: bool) -> tuple[str, bool]:
    """(key, typed_now): env > remembered file > hidden prompt."""
    if spec.swanlab_api_key is not None:
        return spec.swanlab_api_key.get_secret_value(), False
    if not interactive:
        raise LookupError
    import getpass

    key = getpass.getpass("SwanLab API key (hidden): ").strip()
    if not key:
        raise LookupError
    return key, True


@swanlab_app.command("login", epilog=EPILOG)
@some_spec_options("config", "container", "swanlab_host", "swanlab_api_key", "http_proxy", "https_proxy")
def login_command(
    remember: bool = typer.Option(True, "--remember/--no-remember", help="Keep a typed key in the 0600 file."),
    install_missing: bool = typer.Option(False, "--install-missing",
                                         help="Install swanlab (a pinned, tested version) if it is missing."),
    **options: Any,
) -> None:
    """Log in to SwanLab where the training runs (key on stdin), verify the login; install swanlab only if asked."""
    from verl_deploy.cli.options import flags_from
    from verl_deploy.cli.output import console, fail
    from verl_deploy.findings import UserError, error
    from verl_deploy.secrets import save_swanlab_key
    from verl_deploy.sources import resolve
    from verl_deploy.swanlab_setup import SWANLAB_PIN, SwanLabSetupError, setup_swanlab

    try:
        flags, config_file = flags_from(options)
        spec = resolve(flags=flags, environ=os.environ, config_file=config_file)
        key, typed = resolve_key(spec, interactive=sys.stdin.isatty())
    except UserError as exc:
        raise fail(exc.findings) from None
    except LookupError:
        raise fail([error("swanlab_api_key", "no API key", "export SWANLAB_API_KEY=... or run this in a terminal "
                          "to type it (hidden)")]) from None
    if typed and remember:
        path = save_swanlab_key(key)
        console(stderr=True).print(f"[dim]key remembered in {path} (mode 0600)[/]")
    try:
        def consent(where: str) -> bool:
            if install_missing:
                return True
            return sys.stdin.isatty() and typer.confirm(f"swanlab is not installed in {where}; "
                                                        f"pip install {SWANLAB_PIN} there?", default=False)

        report = setup_swanlab(spec, key, install=consent)
    except SwanLabSetupError as exc:
        raise fail([error("swanlab", str(exc), exc.fix)]) from None
    out = console()
    for step in report.steps:
        out.print(f"[green]ok[/] {step}")
