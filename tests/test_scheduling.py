"""The order the suite hands its tests out in (tests/conftest.py scheduling_order): every test exactly once, the
groups first, and the tests that mostly wait spread among the others rather than run all at once."""

from __future__ import annotations

from pathlib import Path

from conftest import WAIT_BOUND, scheduling_order


class Item:
    def __init__(self, name: str, group: str | None = None) -> None:
        self.path, self.group = Path("tests") / name, group

    def get_closest_marker(self, name: str):
        return self.group if name == "xdist_group" else None


def test_every_test_once_groups_first_and_the_waiting_spread():
    waiting = [Item(WAIT_BOUND[0]) for _ in range(5)]
    working = [Item("test_import.py") for _ in range(20)]
    grouped = [Item("test_slurm.py", "slurm") for _ in range(3)]
    items = [*working[:10], *waiting, *grouped, *working[10:]]
    ordered = scheduling_order(items)
    assert sorted(map(id, ordered)) == sorted(map(id, items))
    assert ordered[:3] == grouped
    places = [index for index, item in enumerate(ordered) if item in waiting]
    gaps = [b - a for a, b in zip(places, places[1:])]
    assert min(gaps) >= 4, places  # 20 working tests between 5 waiting ones: never two of them side by side
    assert [item for item in ordered if item in working] == working  # the rest keeps its file order


def test_no_waiting_tests_keeps_the_file_order():
    items = [Item("test_a.py"), Item("test_b.py", "g"), Item("test_c.py")]
    assert scheduling_order(items) == [items[1], items[0], items[2]]
