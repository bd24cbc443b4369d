"""The floors of the house (docs/ARCHITECTURE.md): each module imports only its own package or
those on floors below, lazy imports inside functions included, so no cycle can form between
packages and a reader can tell what a change may reach from where it sits."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("scheduling", "simulator", "tenants", "llmserver")

# Bottom to top. A module belongs to the longest name listed that it is, or is inside of.
FLOORS: tuple[frozenset[str], ...] = tuple(
    frozenset(floor)
    for floor in (
        {"scheduling", "simulator", "llmserver.env"},
        {"tenants"},
        {"llmserver.conf"},
        {"llmserver.cluster"},
        {"llmserver.backends", "llmserver.wire"},
        {"llmserver.runtime"},
        {"llmserver.pipeline"},
        {"llmserver.batches"},
        {"llmserver.process"},
        {"llmserver.api", "llmserver.dashboard"},
        {"llmserver.asgi", "llmserver.proxy"},
        {"llmserver.serving"},
        {"llmserver.management"},
        {
            "llmserver",
            "llmserver.apps",
            "llmserver.checks",
            "llmserver.settings",
            "llmserver.signals",
            "llmserver.testing",
            "llmserver.urls",
        },
    )
)
LEVEL = {name: level for level, floor in enumerate(FLOORS) for name in floor}
GLUE = len(FLOORS) - 1  # Django's glue on top: its modules wire each other up


def group(module: str) -> str | None:
    """The floor's name `module` belongs to; None outside this repository's packages."""
    parts = module.split(".")
    for n in range(len(parts), 0, -1):
        name = ".".join(parts[:n])
        if name in LEVEL:
            return name
    return None


def modules() -> list[tuple[str, Path]]:
    found = []
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            if "migrations" in path.parts:
                continue
            name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
            found.append((name.removesuffix(".__init__"), path))
    return found


def imported(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            # `from llmserver import signals` imports llmserver.signals; a name that is not a
            # module falls back to its module's floor in `group`.
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_every_module_of_the_packages_sits_on_a_floor():
    assert [name for name, _ in modules() if group(name) is None] == []


def test_no_module_imports_from_a_floor_above_or_beside_its_own():
    upward = []
    for name, path in modules():
        own = group(name)
        assert own is not None
        for target in imported(path):
            other = group(target)
            if other is None or other == own or LEVEL[other] == LEVEL[own] == GLUE:
                continue
            if LEVEL[other] >= LEVEL[own]:
                upward.append(f"{name} imports {target}")
    assert upward == []
