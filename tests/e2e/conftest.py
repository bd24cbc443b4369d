"""End to end: daphne and the simulator as real processes on loopback, the `openai` SDK as client."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from llmserver.testing.processes import Database, GatewayProcess, start_gateway
from simulator.launcher import RunningSimulator, start_simulator


@pytest.fixture(scope="module")
def e2e_simulator() -> Iterator[RunningSimulator]:
    sim = start_simulator("--max-num-seqs", "8", "--model", "demo-llama", "--speed", "10")
    yield sim
    sim.stop()


@pytest.fixture(scope="module")
def e2e_gateway(
    e2e_simulator: RunningSimulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    database = Database(Path(tmp_path_factory.mktemp("e2e")))
    gateway = start_gateway(database.url, e2e_simulator.url, {"SCRAPE_INTERVAL": "0.05"})
    yield gateway
    gateway.stop()
    database.drop()


@pytest.fixture
def client(e2e_gateway: GatewayProcess):
    import openai

    with openai.OpenAI(
        base_url=e2e_gateway.url + "/v1",
        api_key=e2e_gateway.key("alice"),
        max_retries=0,
        timeout=30,
    ) as c:
        yield c
