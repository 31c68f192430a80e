"""The order the suite hands its tests out in (tests/conftest.py scheduling_order): every test exactly once, the
groups first, the rest in file order."""

from __future__ import annotations

from pathlib import Path

from conftest import scheduling_order


class Item:
    def __init__(self, name: str, group: str | None = None) -> None:
        self.path, self.group = Path("tests") / name, group

    def get_closest_marker(self, name: str):
        return self.group if name == "xdist_group" else None


def test_every_test_once_groups_first_and_the_rest_in_file_order():
    working = [Item("test_import.py") for _ in range(20)]
    grouped = [Item("test_slurm.py", "slurm") for _ in range(3)]
    items = [*working[:10], *grouped, *working[10:]]
    ordered = scheduling_order(items)
    assert sorted(map(id, ordered)) == sorted(map(id, items))
    assert ordered[:3] == grouped
    assert ordered[3:] == working


def test_without_groups_the_file_order_is_kept():
    items = [Item("test_a.py"), Item("test_b.py", "g"), Item("test_c.py")]
    assert scheduling_order(items) == [items[1], items[0], items[2]]
