"""A request depends on its port (`llmserver/pipeline/port.py`), not on the process's whole
`Gateway`: only the module that makes and starts the gateway imports it; the pipeline, the
batches and the consumers are given the port, or the one thing they need."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
GATEWAY = "llmserver.runtime.gateway"


def imports_the_gateway(path: Path) -> bool:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import) and any(a.name == GATEWAY for a in node.names):
            return True
        if isinstance(node, ast.ImportFrom) and node.module == GATEWAY:
            return True
    return False


def test_only_the_process_module_imports_the_gateway() -> None:
    importers = sorted(
        str(path.relative_to(ROOT))
        for path in (ROOT / "llmserver").rglob("*.py")
        if path != ROOT / "llmserver/runtime/gateway.py" and imports_the_gateway(path)
    )
    assert importers == ["llmserver/process.py"]
