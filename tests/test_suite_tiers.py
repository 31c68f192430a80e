"""The suite's tiers stay true as tests are added: a test file that starts a real service carries its mark
(so `-m "not docker"` really leaves Docker out), and one whose module- or session-scoped fixture starts a
service is one xdist group (so parallel workers never start the same cluster twice or fight over it)."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import GROUPS, TIERS

TESTS = Path(__file__).parent
# what in a test file's source says it starts the service of a tier
STARTS = {
    "docker": re.compile(r"\bdocker_engine\b|\bimport realdocker\b|\bfrom realdocker\b"),
    "slurm": re.compile(r"\bslurmcluster\b"),
    "ray": re.compile(r"\bRAY_BIN\b|\bstart_head\b"),
    "realverl": re.compile(r"\brealverl\b|\bsite_or_skip\b|\benv_with_verl\b|\brun_with_verl\b"),
}
SHARED_FIXTURE = re.compile(r"@pytest\.fixture\(scope=\"(module|session)\"")


def test_every_file_that_starts_a_service_has_its_tier_mark():
    for path in sorted(set(TESTS.glob("test_*.py")) - {Path(__file__)}):
        text = path.read_text()
        for tier, starts in STARTS.items():
            if starts.search(text) and tier != "docker":  # docker: marked by the docker_engine fixture itself
                assert tier in TIERS.get(path.name, ()), f"{path.name} starts {tier}: add it to TIERS in conftest.py"


def test_a_file_sharing_a_started_service_across_tests_is_one_group():
    for path in sorted(set(TESTS.glob("test_*.py")) - {Path(__file__)}):
        text = path.read_text()
        starts = [tier for tier, pattern in STARTS.items() if pattern.search(text) and tier != "realverl"]
        if starts and SHARED_FIXTURE.search(text):
            assert path.name in GROUPS, f"{path.name}: a shared {starts} fixture needs an xdist group in conftest.py"


def test_the_tiers_name_files_that_exist():
    for name in [*TIERS, *GROUPS]:
        assert (TESTS / name).is_file(), name
