"""The scheduler is a pure library: importing it loads no Django and no HTTP client."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_it_imports_without_django_or_an_http_client() -> None:
    code = (
        "import sys, scheduling; "
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('django', 'httpx', 'aiohttp')); "
        "print(scheduling.__file__); print(bad)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out[0].startswith(str(ROOT / "scheduling"))
    assert out[1] == "[]"
