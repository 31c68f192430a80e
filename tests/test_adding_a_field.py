"""The README's "Adding a spec field" is true: its diff (a declaration in spec.py and a profile key), applied to a
copy of the tree, gives a flag, an environment variable, a plan row, the verl override and its refusals."""

from __future__ import annotations

import re
import shutil
import subprocess

from conftest import ROOT, run_cli


def readme_diff() -> str:
    section = (ROOT / "README.md").read_text().split("## Adding a spec field", 1)[1]
    return re.search(r"```diff\n(.*?)```", section, re.S).group(1)


def tree_with_the_field(tmp_path):
    copy = tmp_path / "tree"
    shutil.copytree(ROOT / "src", copy / "src")
    patch = tmp_path / "field.diff"
    patch.write_text(readme_diff())
    applied = subprocess.run(["git", "apply", "--verbose", str(patch)], cwd=copy, capture_output=True, text=True)
    assert applied.returncode == 0, applied.stderr  # the README's diff still applies to the tree
    return copy / "src"


def test_the_readme_diff_adds_a_working_field(tmp_path):
    src = tree_with_the_field(tmp_path)
    env = {"PYTHONPATH": str(src), "VERL_DEPLOY_STATE_DIR": str(tmp_path / "state")}

    helped = run_cli("plan", "--help", env=env)
    panel = helped.stdout.split("Hyper-parameters", 1)[1].split("╰", 1)[0]
    assert "--ppo-epochs" in panel and "Passes of the actor update" in panel

    by_flag = run_cli("plan", "--all", "--ppo-epochs", "2", env=env)
    assert by_flag.returncode == 0, by_flag.stderr[-2000:]
    row = next(line for line in by_flag.stdout.splitlines() if line.startswith("ppo_epochs "))
    assert row.split()[1:] == ["2", "flag", "--ppo-epochs"]
    assert "    actor_rollout_ref.actor.ppo_epochs=2 \\" in by_flag.stdout  # checked against verl's config: ready
    assert "ready: 0 error(s)" in by_flag.stdout

    by_env = run_cli("plan", "--json", "--device", "gpu", "--framework", "fsdp", "--verl-version", "0.9.1",
                     env={**env, "PPO_EPOCHS": "3"})
    document = __import__("json").loads(by_env.stdout)
    assert document["sources"]["ppo_epochs"] == "env PPO_EPOCHS"
    assert "actor_rollout_ref.actor.ppo_epochs=3" in document["overrides"]

    wrong = run_cli("plan", "--ppo-epochs", "0", env=env)
    assert wrong.returncode == 1 and "Traceback" not in wrong.stderr
    assert "ppo_epochs:" in wrong.stderr and "fix: change --ppo-epochs" in wrong.stderr

    taken = run_cli("plan", "-o", "actor_rollout_ref.actor.ppo_epochs=2", env=env)
    assert taken.returncode == 1 and "use --ppo-epochs instead of this --override" in taken.stdout + taken.stderr


def test_without_the_field_the_scripts_are_the_ones_the_tree_writes(tmp_path):
    """The new override goes after the existing ones: the scripts of a spec differ only by that one line."""
    src = tree_with_the_field(tmp_path)
    before, after = tmp_path / "before", tmp_path / "after"
    assert run_cli("generate", "--output-dir", str(before)).returncode == 0
    assert run_cli("generate", "--output-dir", str(after), env={"PYTHONPATH": str(src)}).returncode == 0
    old = (before / "run_training.sh").read_text().splitlines()
    new = (after / "run_training.sh").read_text().splitlines()
    added = [line for line in new if line not in old]
    assert [line.strip() for line in added] == ["actor_rollout_ref.actor.ppo_epochs=1 \\"]
    assert [line for line in new if line not in added] == old
    assert (before / "start_verl.sh").read_bytes() == (after / "start_verl.sh").read_bytes()
