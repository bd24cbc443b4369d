"""The floors of the house as a checker (docs/ARCHITECTURE.md): which floor each module sits
on, and the imports that break the rule, over any tree, so `test_floors.py` checks this
repository and shows on small planted trees that each kind of break is caught."""

from __future__ import annotations

import ast
from collections.abc import Iterable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("scheduling", "simulator", "tenants", "llmserver")

# Bottom to top. A module belongs to the longest name listed that it is, or is inside of.
FLOORS: tuple[frozenset[str], ...] = tuple(
    frozenset(floor)
    for floor in (
        {"scheduling", "simulator"},
        {"tenants"},
        {"llmserver.env", "llmserver.conf"},
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
# Names that hold only their own module: each module or subpackage inside must be listed
# itself, so a new one is given its floor before the rule can say what it may import.
ONLY_ITSELF = frozenset({"llmserver"})


class House:
    """The modules of `packages` under `root`, placed on `floors` (bottom to top; the top
    floor is Django's glue, whose modules wire each other up)."""

    def __init__(
        self,
        root: Path = ROOT,
        packages: Iterable[str] = PACKAGES,
        floors: tuple[frozenset[str], ...] = FLOORS,
        only_itself: frozenset[str] = ONLY_ITSELF,
    ) -> None:
        self.root = root
        self.level = {name: level for level, floor in enumerate(floors) for name in floor}
        self.glue = len(floors) - 1
        self.only_itself = only_itself
        self.modules: dict[str, Path] = {}
        for package in packages:
            for path in sorted((root / package).rglob("*.py")):
                if "migrations" not in path.parts:
                    name = ".".join(path.relative_to(root).with_suffix("").parts)
                    self.modules[name.removesuffix(".__init__")] = path

    def group(self, module: str) -> str | None:
        """The floor's name `module` belongs to; None outside the packages or off the table."""
        parts = module.split(".")
        for n in range(len(parts), 0, -1):
            name = ".".join(parts[:n])
            if name in self.level:
                return name if name == module or name not in self.only_itself else None
        return None

    def imported(self, module: str) -> set[str]:
        """Every name `module` imports, relative imports made absolute, lazy and type-checking
        ones included. `from a import b` gives `a.b`: a name that is not a module falls back to
        its module's floor in `group`."""
        path = self.modules[module]
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        names: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join([*anchor, *([base] if base else [])])
                names.update(f"{base}.{alias.name}" for alias in node.names)
        return names

    def unplaced(self) -> list[str]:
        return [name for name in self.modules if self.group(name) is None]

    def upward(self) -> list[str]:
        """Each import of a floor above or beside the importer's own."""
        found = []
        for name in self.modules:
            own = self.group(name)
            for target in sorted(self.imported(name)):
                other = self.group(target)
                if own is None or other is None or other == own:
                    continue
                if self.level[other] == self.level[own] == self.glue:
                    continue
                if self.level[other] >= self.level[own]:
                    found.append(f"{name} imports {target}")
        return found

    def cycles(self) -> list[list[str]]:
        """Modules that import each other round a circle, anywhere in the tree (inside one
        package, or between the glue floor's packages, which the floors let import each
        other), each circle once (Tarjan's strongly connected components of more than one
        module)."""
        edges: dict[str, set[str]] = {}
        for name in self.modules:
            edges[name] = {
                target
                for target in map(self._module_of, self.imported(name))
                if target is not None and target != name
            }
        return _circles(edges)

    def _module_of(self, name: str) -> str | None:
        """The module a name imported is, or is defined in."""
        while name and name not in self.modules:
            name = name.rpartition(".")[0]
        return name or None


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in sorted(edges[node]):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while (top := stack.pop()) != node:
                component.append(top)
            if component:
                found.append(sorted([node, *component]))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return found
