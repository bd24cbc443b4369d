"""The real vLLM (its CPU build, SmolLM2-135M) and a gateway in front of it.

Deselected from plain `pytest` (pyproject's `-m 'not realengine and not vllm'`): the engine
needs a 3.6 GB install, about a minute to start, 4 GB of memory and keeps a core busy.
`make vllm` installs what they need and runs them with `-m vllm`; run that way without the
install, they skip and say how to get it. One engine for the session, one gateway per module.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmserver.testing.processes import Database, GatewayProcess, start_gateway
from llmserver.testing.vllm_server import SERVED_NAME, VllmServer, missing, start_vllm

MODEL = "demo-llama"
SLOTS = 4
DEMO_TIERS = ("interactive", "standard", "batch")


@pytest.fixture(scope="session")
def vllm() -> Iterator[VllmServer]:
    reason = missing()
    if reason:
        pytest.skip(reason)
    server = start_vllm(slots=SLOTS, kv_events=True)
    yield server
    server.stop()


def gateway_for(
    engine: VllmServer,
    tmp: Path,
    *backend_args: str,
    tiers: dict[str, dict[str, object]] | None = None,
    backend: dict[str, object] | None = None,
) -> GatewayProcess:
    """The demo's tenants and keys, its model routed to vLLM (backend "vllm", `add_backend`'s
    `backend_args`, then the fields in `backend`) instead of the simulator, its tiers changed
    as `tiers` says. Every tier's time-per-token ceiling is off: two shared CPU cores are
    always slower than the 150 ms a GPU is held to."""
    database = Database(tmp)
    spec = tmp / "spec.json"
    no_tpot = {"gate_max_tpot_ms": None}
    changed = {name: {**no_tpot, **(tiers or {}).get(name, {})} for name in DEMO_TIERS}
    spec.write_text(json.dumps({"tiers": changed, "backends": {"vllm": backend or {}}}))
    gateway = start_gateway(
        database.url,
        engine.url,
        quiet=True,
        setup=[
            ["add_backend", "simulator", engine.url, "--disabled"],
            ["add_backend", "vllm", engine.url, "--model", f"{MODEL}:{SERVED_NAME}", *backend_args],
            ["apply_config", str(spec)],
        ],
    )
    gateway.database = database  # type: ignore[attr-defined]
    return gateway


@pytest.fixture(scope="module")
def gateway(vllm: VllmServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[GatewayProcess]:
    tiers = {"interactive": {"gate_max_waiting": 1}}
    gateway = gateway_for(vllm, Path(tmp_path_factory.mktemp("vllm")), tiers=tiers)
    yield gateway
    gateway.stop()
    gateway.database.drop()  # type: ignore[attr-defined]
