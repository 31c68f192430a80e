"""`verl-deploy --help` imports no command module; a subcommand imports its own module only; the help's list
is the commands' own first docstring lines, in the order a user meets them."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys

from conftest import run_cli

ORDER = ["check", "init", "plan", "generate", "launch", "runs", "status", "logs", "stop", "resume", "report",
         "evidence", "diagnose", "bundle", "clean", "features", "verify-env", "import", "migrate", "container",
         "swanlab"]
COMMAND_MODULES = ("_cmd",)
TREE = {k: v for k, v in os.environ.items() if k == "PYTHONPATH"}  # the package under test, also in the probes

PROBE = """
import sys
from verl_deploy.cli import main
sys.argv = ["verl-deploy", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print("MODULES", *sorted(m for m in sys.modules if m.startswith("verl_deploy.cli.")))
"""


def modules_after(*args: str) -> tuple[str, list[str]]:
    result = subprocess.run([sys.executable, "-c", PROBE, *args], capture_output=True, text=True, timeout=120,
                            env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", "VERL_DEPLOY_STATE_DIR": "/nonexistent",
                                 **TREE})
    out, _, modules = result.stdout.rpartition("MODULES")
    return out, modules.split()


def listed(help_text: str) -> list[str]:
    """The command names of the help's Commands panel, top to bottom."""
    panel = help_text.split("Commands")[1]
    return [line.strip("│ ").split()[0] for line in panel.splitlines()[1:] if line.startswith("│ ") and
            not line.startswith("│  ")]


def test_help_lists_every_command_in_order_without_importing_any():
    out, modules = modules_after("--help")
    assert listed(out) == ORDER
    assert not [m for m in modules if m.endswith(COMMAND_MODULES)], modules


def test_a_subcommand_imports_its_own_module_and_no_other():
    out, modules = modules_after("features")
    assert "vpp" in out  # the command ran
    assert [m for m in modules if m.endswith(COMMAND_MODULES)] == ["verl_deploy.cli.features_cmd"]
    _, modules = modules_after("launch", "--help")
    assert [m for m in modules if m.endswith(COMMAND_MODULES)] == ["verl_deploy.cli.launch_cmd"]


def test_each_listed_help_is_the_commands_own_first_line():
    from typer.main import get_group

    from verl_deploy.cli import COMMANDS, app

    for entry in COMMANDS.values():
        importlib.import_module(entry.module)
    built = get_group(app).commands
    assert set(built) == set(COMMANDS)
    for name, entry in COMMANDS.items():
        command = built[name]
        own = (command.short_help or command.help or "").split("\n\n")[0].strip()
        assert (name, entry.help, entry.hidden) == (name, own, command.hidden)


def test_the_lazy_help_is_the_help_of_the_loaded_commands():
    lazy, _ = modules_after("--help")
    eager = run_cli("--help")  # the real entry point; in-process tests may have imported every module already
    code = "import verl_deploy.cli as c, importlib\n[importlib.import_module(e.module) for e in c.COMMANDS.values()]\n"
    loaded = subprocess.run([sys.executable, "-c", code + PROBE, "--help"],
                            capture_output=True, text=True, timeout=120,
                            env={"COLUMNS": "200", "PATH": "/usr/bin:/bin", **TREE})
    assert eager.returncode == 0
    assert lazy == loaded.stdout.rpartition("MODULES")[0]
    assert listed(eager.stdout) == ORDER


def test_an_unknown_command_is_still_one_line_with_the_near_names():
    result = run_cli("lanch")
    assert result.returncode == 2
    assert result.stderr.strip().splitlines() == [
        "error: verl-deploy: No such command 'lanch'. Did you mean 'launch', 'plan', 'clean'? — fix: see `verl-deploy -h` "
        "for what it takes"]
