"""The plan is for the verl that will run: the version comes from the tree the training runs from.

Trees are made from the real wheels' files (verl/ with its configs and version file); the 0.10.0.dev tree
is verl 0.9.1's real code with the version file of verl's main branch, as a main checkout has it.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

import realverl
from conftest import run_cli
from verl_deploy.verl_release import release_of
from verl_deploy.verlconfig.locate import locate


def tree_of(tmp_path: Path, version: str, says: str | None = None) -> Path:
    """A verl tree with `version`'s real configs; its version file says SAYS (as a tag's checkout does)."""
    tree = tmp_path / f"verl-{says or version}"
    shutil.copytree(locate(version).root / "verl", tree / "verl")
    if says:
        (tree / "verl" / "version" / "version").write_text(says + "\n")
    return tree


def plan_json(*args: str, env: dict | None = None) -> tuple[int, dict, str]:
    result = run_cli("plan", "--json", *args, env=env)
    return result.returncode, json.loads(result.stdout), result.stderr


@pytest.mark.parametrize("version, says, profile", [("0.7.0", "0.7.0.dev", "0.7.0"),  # the v0.7.0 tag's own file
                                                    ("0.9.0", None, "0.9")])
def test_plan_uses_the_version_of_the_checkout_it_is_given(tmp_path, version, says, profile):
    tree = tree_of(tmp_path, version, says)
    code, data, err = plan_json("--verl-dir", str(tree))
    assert data["verl"]["version"] == version and data["verl"]["profile"] == profile, data["verl"]
    assert data["sources"]["verl_version"] == f"read from {tree / 'verl' / 'version' / 'version'}"
    unknown = [f for f in data["findings"] if "unknown key" in f["message"]]
    assert not unknown, unknown  # 0.9.0's tree planned as 0.7.0 failed on reward_model.overlong_buffer.*
    assert code == 0, data["findings"]


def test_a_run_dir_without_container_is_the_tree_that_runs(tmp_path):
    tree = tree_of(tmp_path, "0.9.0")
    code, data, _ = plan_json("--run-dir", str(tree))
    assert data["verl"]["version"] == "0.9.0"
    # inside a container the run dir is the container's: not read on this host
    code, boxed, _ = plan_json("--run-dir", str(tree), "--container", "c1")
    assert boxed["verl"]["version"] == "0.7.0" and boxed["sources"]["verl_version"] == "default"


def test_an_explicit_version_that_disagrees_with_the_tree_names_both(tmp_path):
    tree = tree_of(tmp_path, "0.9.0")
    result = run_cli("plan", "--verl-dir", str(tree), "--verl-version", "0.7.0")
    assert result.returncode == 1 and "Traceback" not in result.stderr
    line = next(l for l in result.stderr.splitlines() if "verl_version" in l)
    assert "0.7.0" in line and "0.9.0" in line and "drop --verl-version" in line
    same = run_cli("plan", "--json", "--verl-dir", str(tree), "--verl-version", "0.9.0")  # agrees: fine
    assert json.loads(same.stdout)["verl"]["version"] == "0.9.0"


def test_a_development_tree_is_refused_in_one_line_unless_the_nearest_profile_is_asked_for(tmp_path):
    site = realverl.verl_site("0.9.1")
    if site is None:
        pytest.skip(f"real verl 0.9.1 cannot be installed here: {realverl.why_not('0.9.1')}")
    tree = tmp_path / "verl-main"
    shutil.copytree(site / "verl", tree / "verl", symlinks=True)
    (tree / "verl" / "version" / "version").write_text("0.10.0.dev\n")  # what verl's main branch says

    refused = run_cli("plan", "--verl-dir", str(tree))
    assert refused.returncode == 1 and "Traceback" not in refused.stderr
    errors = [l for l in refused.stderr.splitlines() if l.startswith("error")]
    assert len(errors) == 1 and "0.10.0.dev" in errors[0] and "--nearest-profile" in errors[0], refused.stderr
    assert "recipe.dapo.main_dapo" not in refused.stdout  # no legacy 0.7.0 command for a 0.10 tree

    shim = tmp_path / "bin" / "python3"  # the host's python has this verl (as on a host that runs the checkout)
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nPYTHONPATH={tree}:{site} exec "{os.sys.executable}" "$@"\n')
    shim.chmod(0o755)
    env = {"PATH": f"{shim.parent}:{os.environ['PATH']}"}
    code, data, err = plan_json("--verl-dir", str(tree), "--nearest-profile", "--framework", "fsdp", "--device", "gpu",
                                env=env)
    assert data["verl"]["version"] == "0.10.0.dev" and data["verl"]["profile"] == "0.9", data["verl"]
    stand_in = [f for f in data["findings"] if f["field"] == "verl_version" and f["level"] == "warning"]
    assert stand_in and "nearest-profile" in stand_in[0]["message"], data["findings"]
    assert "verify" in data, "verl's own validation must run for a release with no profile"
    assert data["verify"]["verl_version"] == "0.10.0.dev", data["verify"]


@pytest.mark.parametrize("text, expected", [("0.7.0.dev", "0.7.0"), ("v0.9.1+npu", "0.9.1"), ("0.10.0.dev", "0.10.0"),
                                            ("0.8.0rc1", "0.8.0"), ("0.6.1.post1", "0.6.1"), ("0.9.0", "0.9.0")])
def test_release_of_reads_verls_version_strings(text, expected):
    assert release_of(text) == expected


MIRROR = Path(os.environ.get("VERL_DEPLOY_VERL_MIRROR", "/work/.mirror/verl-project+verl/repo"))


def test_a_checkout_of_verl_main_plans_with_the_nearest_profile_and_verls_own_code_of_main(tmp_path):
    """verl's main branch itself (0.10.0.dev), not a stand-in: exported from a git mirror of verl, planned with
    --nearest-profile, and verified by main's own config files, dataclasses and validate_config."""
    import subprocess

    if not (MIRROR / "HEAD").is_file():
        pytest.skip(f"no git mirror of verl at {MIRROR} (VERL_DEPLOY_VERL_MIRROR)")
    site = realverl.verl_site("0.9.1")  # the light packages verl imports (main needs the same ones as 0.9.1)
    if site is None:
        pytest.skip(f"real verl 0.9.1 cannot be installed here: {realverl.why_not('0.9.1')}")
    tree = tmp_path / "verl-main"
    tree.mkdir()
    archive = subprocess.run(["git", "-C", str(MIRROR), "archive", "main", "verl"], capture_output=True, timeout=120)
    assert archive.returncode == 0, archive.stderr[-500:]
    subprocess.run(["tar", "-x", "-C", str(tree)], input=archive.stdout, check=True, timeout=120)
    says = (tree / "verl" / "version" / "version").read_text().strip()
    assert says.startswith("0.10."), says

    refused = run_cli("plan", "--verl-dir", str(tree))
    assert refused.returncode == 1 and says in refused.stderr and "--nearest-profile" in refused.stderr

    shim = tmp_path / "bin" / "python3"  # a host whose python runs main's verl (with 0.9.1's light imports)
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nPYTHONPATH={tree}:{site} exec "{os.sys.executable}" "$@"\n')
    shim.chmod(0o755)
    code, data, _ = plan_json("--verl-dir", str(tree), "--nearest-profile", "--framework", "fsdp", "--device", "gpu",
                              env={"PATH": f"{shim.parent}:{os.environ['PATH']}"})
    assert data["verl"]["version"] == says and data["verl"]["profile"] == "0.9", data["verl"]
    assert data["entry"]["module"] == "verl.trainer.main_ppo"  # DAPO from verl's core, never recipe.dapo
    assert data["verify"]["verl_version"] == says and data["verify"]["status"] == "passed", data["verify"]
    assert code == 0, [f for f in data["findings"] if f["level"] == "error"]
