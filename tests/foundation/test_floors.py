"""The floors of the house (docs/ARCHITECTURE.md): each module imports only its own package or
those on floors below, lazy, relative and type-checking imports included, and no modules
anywhere import each other round a circle, so a reader can tell what a change may reach from
where it sits. The checker is `floors.py`; the planted trees below show that it catches each
kind of break."""

from __future__ import annotations

from pathlib import Path

from floors import House


def test_every_module_of_the_packages_sits_on_a_floor():
    assert House().unplaced() == []


def test_no_module_imports_from_a_floor_above_or_beside_its_own():
    assert House().upward() == []


def test_no_modules_import_each_other_round_a_circle():
    assert House().cycles() == []


def plant(root: Path, files: dict[str, str]) -> House:
    """A small house under `root`: `low` below `high`, `llmserver` (only itself) on top."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    floors = (frozenset({"low"}), frozenset({"high"}), frozenset({"llmserver"}))
    return House(root, ("low", "high", "llmserver"), floors, frozenset({"llmserver"}))


def test_a_relative_import_up_a_floor_is_caught(tmp_path):
    house = plant(
        tmp_path,
        {"low/__init__.py": "", "high/__init__.py": "", "low/a.py": "from ..high import b\n"},
    )
    assert house.upward() == ["low.a imports high.b"]


def test_a_relative_import_inside_its_own_package_passes(tmp_path):
    house = plant(
        tmp_path,
        {"low/__init__.py": "", "low/a.py": "from . import b\nfrom .b import c\n", "low/b.py": ""},
    )
    assert house.upward() == []


def test_a_new_subpackage_off_the_table_is_caught(tmp_path):
    house = plant(tmp_path, {"llmserver/__init__.py": "", "llmserver/extra/__init__.py": ""})
    assert house.unplaced() == ["llmserver.extra"]


def test_a_circle_inside_a_package_is_caught_even_through_a_type_checking_import(tmp_path):
    house = plant(
        tmp_path,
        {
            "low/__init__.py": "",
            "low/a.py": "from low.b import B\n",
            "low/b.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from low import a\n",
            "low/c.py": "from low.a import A\n",
        },
    )
    assert house.cycles() == [["low.a", "low.b"]]


def test_a_circle_through_a_lazy_relative_import_is_caught(tmp_path):
    house = plant(
        tmp_path,
        {
            "low/__init__.py": "",
            "low/a.py": "def f():\n    from .b import g\n",
            "low/b.py": "from low.a import f\n",
        },
    )
    assert house.cycles() == [["low.a", "low.b"]]
