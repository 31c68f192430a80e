"""The rule inventory: every rule's citation points at a check in that release's real source, and the
committed per-release tables (docs/inventory/) are what tools/rule_inventory.py makes of it today."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import realverl
from verl_deploy.rules import RULES
from verl_deploy.rules.inventory import RELEASES, Citation, citation_problem, citations, table

ROOT = Path(__file__).resolve().parents[1]
RULE_TEXT = {rule.name: " ".join(rule.source.values()) for rule in RULES}


def tree_or_skip(release: str) -> Path:
    site = realverl.verl_site(release)
    if site is None:
        pytest.skip(f"real verl {release} cannot be installed here: {realverl.why_not(release)}")
    return site


@pytest.mark.parametrize("release", RELEASES)
def test_every_citation_of_a_release_points_at_a_check_in_its_source(release):
    tree = tree_or_skip(release)
    cited = [c for c in citations(RULES) if c.release == release]
    assert cited, f"no rule cites verl {release}"
    problems = [problem for c in cited if (problem := citation_problem(c, tree, RULE_TEXT[c.rule]))]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("release", RELEASES)
def test_the_committed_inventory_is_current(release):
    tree = tree_or_skip(release)
    committed = (ROOT / "docs" / "inventory" / f"verl-{release}.md").read_text()
    assert committed == table(release, tree, RULES), (
        f"docs/inventory/verl-{release}.md is stale: python tools/rule_inventory.py --tree {tree} --release {release}")


def test_a_citation_that_no_longer_matches_its_line_is_caught(tmp_path):
    tree = tree_or_skip("0.9.1")
    moved = tmp_path / "verl" / "protocol.py"
    moved.parent.mkdir(parents=True)
    original = (tree / "verl" / "protocol.py").read_text().splitlines()
    moved.write_text("\n".join(["# moved"] * 40 + original) + "\n")  # the check is now 40 lines further down
    [chunk] = [c for c in citations(RULES) if c.release == "0.9.1" and c.path == "verl/protocol.py"]
    assert citation_problem(chunk, tree, RULE_TEXT[chunk.rule]) is None
    assert "holds no assert" in citation_problem(chunk, tmp_path, RULE_TEXT[chunk.rule])
    gone = Citation(chunk.rule, "0.9.1", "verl/no_such_file.py", 1, 1)
    assert "does not exist" in citation_problem(gone, tree, RULE_TEXT[chunk.rule])


def test_the_inventory_lists_known_checks_with_their_coverage():
    tree = tree_or_skip("0.9.1")
    text = table("0.9.1", tree, RULES)
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| verl/")}
    assert "rule agent_loop_chunks" in rows["verl/protocol.py:871"]  # the assert; the rule cites its message line
    assert "rule loss_agg_mode_in_release" in next(r for k, r in rows.items() if k.startswith("verl/workers/config/actor.py")
                                                   and "loss_agg_mode" in r)
    assert any("verify" in r for k, r in rows.items() if k.startswith("verl/workers/config/"))
    # every check of 0.9.1 has a rule or a reviewed reason; a new one nobody reviewed is "not covered"
    assert not [r for r in rows.values() if r.endswith("| not covered |")]


def test_a_check_no_rule_or_note_knows_is_listed_as_not_covered(tmp_path):
    new = tmp_path / "verl" / "workers" / "rollout" / "new_engine.py"
    new.parent.mkdir(parents=True)
    new.write_text("def start(config):\n    assert config.rollout.max_num_seqs % 7 == 0, 'seven'\n")
    text = table("0.9.1", tmp_path, RULES)
    assert "| verl/workers/rollout/new_engine.py:2 | assert | config.rollout.max_num_seqs % 7 == 0 | seven | " \
           "not covered |" in text
    assert "1 checks: 0 covered by a rule, 0 only by `--verify`, 0 on values no verl-deploy setting reaches, " \
           "1 not covered." in text


def test_the_tool_writes_a_table_and_refuses_a_tree_without_verl(tmp_path):
    tree = tree_or_skip("0.9.1")
    out = tmp_path / "out"
    done = subprocess.run([sys.executable, str(ROOT / "tools" / "rule_inventory.py"), "--tree", str(tree), "--release",
                           "0.9.1", "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert (out / "verl-0.9.1.md").read_text() == (ROOT / "docs" / "inventory" / "verl-0.9.1.md").read_text()
    empty = tmp_path / "empty"
    empty.mkdir()
    refused = subprocess.run([sys.executable, str(ROOT / "tools" / "rule_inventory.py"), "--tree", str(empty),
                              "--release", "0.9.1", "--out", str(out)], capture_output=True, text=True, timeout=120)
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1 and "no verl/" in refused.stderr
    shutil.rmtree(out)
