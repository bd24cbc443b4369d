"""Every path of this repository that the docs name exists: a reader following the docs to a
file finds it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OURS = ("llmserver", "scheduling", "tenants", "simulator", "tests", "bench", "docs", "templates")
# `path/to/file.py` or `path/to/dir/`, optionally followed by a symbol or line: `x.py` `f`.
NAMED = re.compile(r"`((?:" + "|".join(OURS) + r")/[\w./-]*?)(?:[:` ]|$)")


def named_paths() -> set[tuple[str, str]]:
    found = set()
    for doc in [*sorted((ROOT / "docs").glob("*.md")), ROOT / "README.md"]:
        for match in NAMED.finditer(doc.read_text()):
            found.add((doc.name, match.group(1).rstrip(".")))
    return found


def test_the_docs_name_paths_at_all() -> None:
    assert len(named_paths()) > 50


def test_every_path_the_docs_name_exists() -> None:
    missing = sorted(f"{doc}: {path}" for doc, path in named_paths() if not (ROOT / path).exists())
    assert not missing, "\n".join(missing)
