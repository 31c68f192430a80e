"""verl's config keys live in the profiles (and the templates): no other module spells one (DESIGN.md, Wave 3).

Every string literal of the package is read with `ast` (docstrings and messages that quote verl are prose, not
keys): a literal that IS a verl key (`actor_rollout_ref.actor.ppo_mini_batch_size`, `trainer.use_v1`, a key with a
value `data.gen_batch_size=1`, or a key prefix `actor_rollout_ref.`) fails the test outside profiles/ and
templates/. Rules, verify and checks ask the profile for the key of a knob (Profile.keys_for).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import verl_deploy

PACKAGE = Path(verl_deploy.__file__).parent
SECTIONS = ("actor_rollout_ref", "algorithm", "trainer", "data", "reward", "reward_model", "critic", "rollout",
            "async_training", "ray_kwargs", "global_profiler", "custom_reward_function")
KEY = re.compile(rf"^[+~]{{0,2}}({'|'.join(SECTIONS)})(\.[a-z0-9_]+)+(=.*)?$|^({'|'.join(SECTIONS)})\.$")
# modules other helpers own that still spell keys (named so a new one fails): the importer reads a script's
# own keys back into a spec (issue #23 item 4 left for it)
PENDING = {"importer/build.py"}
NOT_KEYS = {"data.pt"}  # a checkpoint's file name


def key_literals(path: Path) -> list[tuple[int, str]]:
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value not in NOT_KEYS \
                and KEY.match(node.value):
            found.append((node.lineno, node.value))
    return found


def test_no_module_outside_the_profiles_spells_a_verl_key():
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        relative = path.relative_to(PACKAGE).as_posix()
        if relative.startswith(("profiles/", "templates/")) or relative in PENDING:
            continue
        found = key_literals(path)
        if found:
            offenders[relative] = found
    assert not offenders, offenders


def test_the_check_sees_a_key_where_one_is_spelled(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text('A = "actor_rollout_ref."\nK = A + "actor.ppo_mini_batch_size"\n'
                      'X = "trainer.use_v1"\nY = "+reward.reward_kwargs.max_resp_len=8192"\n'
                      'DOC = "trainer.balance_batch (on by default) splits the batch"\n')
    assert [value for _, value in key_literals(sample)] == [
        "actor_rollout_ref.", "trainer.use_v1", "+reward.reward_kwargs.max_resp_len=8192"]
    for pending in PENDING:  # a pending module that no longer spells keys leaves the list
        assert key_literals(PACKAGE / pending), f"{pending} spells no verl key any more: drop it from PENDING"
