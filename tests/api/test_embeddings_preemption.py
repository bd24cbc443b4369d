"""An embeddings request is paused like a whole chat answer: evicted before its answer, it has sent
its client nothing, so it starts again later; its client gets one answer and it is billed once.
The simulator's prefill is slowed so that an embedding holds its slot long enough to be evicted
(an embedding's whole work is its prefill step: `simulator/engine.py`)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest

from simulator.launcher import RunningSimulator, start_simulator
from simulator.protocol import tokenize
from tenants.models import Backend, ModelRoute
from tests.api.conftest import MODEL, read_all, start, usage_rows, wait_for
from tests.api.test_preemption import make_world, running_gateway

EMBEDDER = "embedder"
TEXT = " ".join(["word"] * 40)


def embed(text: str = "short") -> bytes:
    return json.dumps({"model": EMBEDDER, "input": text}).encode()


@pytest.fixture
def slow_prefill() -> Iterator[RunningSimulator]:
    sim = start_simulator(
        "--max-num-seqs", "3", "--model", MODEL, "--prefill-ms-per-token", "25", "--speed", "1"
    )
    yield sim
    sim.stop()


@pytest.fixture
def world(transactional_db: None, slow_prefill: RunningSimulator, settings: Any) -> Any:
    keys = make_world(slow_prefill, settings)
    backend = Backend.objects.get(name="narrow")
    ModelRoute.objects.create(
        public_name=EMBEDDER, backend=backend, upstream_model=MODEL, endpoints="embeddings"
    )
    return keys


async def test_an_embeddings_request_evicted_before_its_answer_starts_again_and_is_billed_once(
    world,
):
    power_key, light_key = world
    async with running_gateway() as gw:
        await wait_for(lambda: gw.snapshot().backends[0].gates[0].open, 5)
        power = [await start(power_key, embed(TEXT), "/v1/embeddings") for _ in range(3)]
        await wait_for(lambda: gw.snapshot().backends[0].in_flight == 3, 10)
        # A waiter evicts only a job of its own model (scheduling/preemption.py, `_Round.victim`).
        light = await start(light_key, embed(), "/v1/embeddings")
        status, _, _ = await read_all(light, 30)
        assert status == 200
        answers = await asyncio.gather(*(read_all(c, 60) for c in power))
        assert gw.scheduler.core.totals["preempted"] >= 1
        assert [status for status, _, _ in answers] == [200] * 3
        assert all(len(json.loads(raw)["data"]) == 1 for _, _, raw in answers)
        await wait_for(lambda: gw.usage.pending == 0, 5)
        rows = [r for r in await usage_rows() if r["user"] == "power"]
        assert [(r["status"], r["endpoint"], r["prompt_tokens"]) for r in rows] == [
            ("ok", "embeddings", len(tokenize(TEXT)))
        ] * 3
