"""vLLM's KV cache events reach the gateway (which binds, as vLLM connects to an endpoint
without a wildcard) and draw a prompt to the backend whose cache holds its start: prompts are
keyed by vLLM's own /tokenize, in the token ids its events carry; a chat's shared start (the
messages before its last) is tokenized once and remembered (`llmserver/runtime/
prompt_tokens.py`)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmserver.testing.processes import Database, GatewayProcess, start_gateway
from llmserver.testing.vllm_server import SERVED_NAME, VllmServer
from simulator.launcher import RunningSimulator, start_simulator
from tests.real_engines import new_key, rows_when_written, sdk, series
from tests.vllm.conftest import MODEL

pytestmark = pytest.mark.vllm
# Long enough to fill several of vLLM's cache blocks, whatever its block size on CPU.
DOCUMENT = " ".join(f"Clause {i}: the tenant keeps the lighthouse lamp lit." for i in range(60))
LOGBOOK = " ".join(f"Entry {i}: the keeper logs every ship that passes." for i in range(60))
CONVERSATION = [
    {"role": "system", "content": LOGBOOK},
    {"role": "user", "content": "Who logs the ships?"},
    {"role": "assistant", "content": "The keeper."},
]


@pytest.fixture(scope="module")
def simulator() -> Iterator[RunningSimulator]:
    sim = start_simulator("--model", MODEL)
    yield sim
    sim.stop()


@pytest.fixture(scope="module")
def gateway(
    vllm: VllmServer, simulator: RunningSimulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    """Two backends for the model: the simulator, whose name sorts first (so it wins every
    tie), and vLLM with its events."""
    database = Database(Path(tmp_path_factory.mktemp("vllm-kv")))
    gateway = start_gateway(
        database.url,
        simulator.url,
        quiet=True,
        setup=[
            ["add_backend", "simulator", simulator.url, "--disabled"],
            ["add_backend", "a-sim", simulator.url, "--model", MODEL],
            [
                "add_backend",
                "vllm",
                vllm.url,
                "--model",
                f"{MODEL}:{SERVED_NAME}",
                "--kv-events-endpoint",
                vllm.kv_events_endpoint,
                "--kv-events-bind",
            ],
        ],
    )
    yield gateway
    gateway.stop()
    database.drop()


def batches_received(gateway: GatewayProcess) -> float:
    return series(gateway.url).get(
        'llmserver_kv_event_batches_total{backend="vllm",outcome="received"}', 0.0
    )


def heard_after(gateway: GatewayProcess, before: float) -> None:
    deadline = time.monotonic() + 10
    while batches_received(gateway) <= before:
        assert time.monotonic() < deadline, "no KV event batch heard"
        time.sleep(0.1)


def test_a_prefix_warmed_straight_at_vllm_draws_the_request_there(gateway, vllm):
    question = [{"role": "user", "content": DOCUMENT + " Who keeps the lamp lit?"}]
    # A client that goes around the gateway fills vLLM's cache; only its events tell.
    before = batches_received(gateway)
    warm = {"model": SERVED_NAME, "messages": question, "max_tokens": 1}
    assert httpx.post(vllm.url + "/v1/chat/completions", json=warm, timeout=120).is_success
    heard_after(gateway, before)
    client = sdk(gateway, new_key(gateway, "kv-routed"))
    client.chat.completions.create(model=MODEL, messages=question, max_tokens=2)
    (row,) = rows_when_written(gateway, "kv-routed", 1)
    assert row["status"] == "ok"
    assert backend_of(gateway, "kv-routed") == "vllm"


def backend_of(gateway: GatewayProcess, user: str) -> str:
    out = gateway.manage(
        "shell",
        "-c",
        "from tenants.models import UsageRecord; "
        f"print(UsageRecord.objects.filter(user={user!r}).latest('id').backend)",
    )
    return out.strip().splitlines()[-1]


def tokenized(vllm: VllmServer, messages: list[dict[str, str]], generation: bool) -> list[int]:
    body = {"model": SERVED_NAME, "messages": messages, "add_generation_prompt": generation}
    return list(httpx.post(vllm.url + "/tokenize", json=body, timeout=60).json()["tokens"])


def tokenize_calls(vllm: VllmServer) -> float:
    """The engine's count of answered /tokenize requests (its HTTP instrumentation)."""
    return sum(
        value
        for name, value in series(vllm.url).items()
        if name.startswith("http_requests_total{") and 'handler="/tokenize"' in name
    )


def test_a_chats_shared_start_is_tokenized_once_and_keys_the_blocks_vllm_cached(gateway, vllm):
    """The start alone (no generation prompt) is what the whole prompt begins with in vLLM's
    own tokens; keyed that way it finds the blocks a direct client had vLLM cache, after one
    /tokenize; the next chat with the same start asks none."""
    whole = tokenized(vllm, [*CONVERSATION, {"role": "user", "content": "Why?"}], True)
    start = tokenized(vllm, CONVERSATION, False)
    assert whole[: len(start)] == start
    before = batches_received(gateway)
    warm = {"model": SERVED_NAME, "messages": [*CONVERSATION, ask("Why?")], "max_tokens": 1}
    assert httpx.post(vllm.url + "/v1/chat/completions", json=warm, timeout=120).is_success
    heard_after(gateway, before)
    client = sdk(gateway, new_key(gateway, "kv-shared-start"))
    calls = tokenize_calls(vllm)
    for count, turn in enumerate(("When?", "Where?"), start=1):
        client.chat.completions.create(
            model=MODEL, messages=[*CONVERSATION, ask(turn)], max_tokens=2
        )
        assert rows_when_written(gateway, "kv-shared-start", count)[-1]["status"] == "ok"
        assert backend_of(gateway, "kv-shared-start") == "vllm"
        assert tokenize_calls(vllm) == calls + 1


def ask(text: str) -> dict[str, str]:
    return {"role": "user", "content": text}
