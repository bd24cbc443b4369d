"""The real engine and a gateway in front of it, one of each per module, stopped at teardown.

These tests are deselected from plain `pytest` (pyproject's `-m 'not realengine'`): on a machine
where the engine is built they would add minutes and take the CPU from the rest of the suite.
`make realengine` builds what they need and runs them with `-m realengine`; run that way without
the binary or the model, they skip and say how to get them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from llmserver.testing.llama_server import ALIAS, LlamaServer, missing, start_llama_server
from llmserver.testing.processes import Database, GatewayProcess, start_gateway

MODEL = "demo-llama"


@pytest.fixture(scope="module")
def llama() -> Iterator[LlamaServer]:
    reason = missing()
    if reason:
        pytest.skip(reason)
    server = start_llama_server(slots=4)
    yield server
    server.stop()


def gateway_for(
    llama: LlamaServer, tmp: Path, kind: str = "llamacpp", in_flight: int = 64
) -> GatewayProcess:
    """The demo's tenants and keys, its model routed to llama-server instead of the simulator.
    The interactive tier keeps llama-server's own queue empty (gate_max_waiting 1; the capacity
    comes from its /props): a request queued inside the engine is one a light user would wait
    behind, while one held by the gateway can be overtaken, or make room by pausing a stream.
    Its time-per-token ceiling is off: on two shared CPU cores this engine is always slower than
    the 150 ms a GPU is held to, and the gate would only stop everyone."""
    database = Database(tmp)
    tiers = tmp / "tiers.json"
    tiers.write_text(
        json.dumps({"tiers": {"interactive": {"gate_max_waiting": 1, "gate_max_tpot_ms": None}}})
    )
    gateway = start_gateway(
        database.url,
        llama.url,
        # A revocation made by another process shows within half a second.
        {"KEY_CACHE_SECONDS": "0.5"},
        quiet=True,
        setup=[
            ["add_backend", "simulator", llama.url, "--disabled"],
            [
                "add_backend",
                "llama",
                llama.url,
                "--kind",
                kind,
                "--max-in-flight",
                str(in_flight),
                "--model",
                f"{MODEL}:{ALIAS}",
            ],
            ["apply_config", str(tiers)],
        ],
    )
    gateway.database = database  # type: ignore[attr-defined]
    return gateway


@pytest.fixture(scope="module")
def gateway(
    llama: LlamaServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    gateway = gateway_for(llama, Path(tmp_path_factory.mktemp("realengine")))
    yield gateway
    gateway.stop()
    gateway.database.drop()  # type: ignore[attr-defined]
