"""The simulator speaks vLLM's OpenAI-compatible dialect: usage chunk with `choices: []`,
`[DONE]`, `max_tokens` respected, errors in OpenAI's shape with an integer code; and its prefix
cache makes a repeated prompt cheaper."""

from __future__ import annotations

import json

import httpx

from simulator.engine import Engine, EngineConfig, Sequence
from simulator.protocol import tokenize


async def test_streaming_with_include_usage_ends_with_a_usage_chunk_and_done(simulator) -> None:
    sim = simulator()
    body = {
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    async with httpx.AsyncClient() as client:
        text = (await client.post(f"{sim.url}/v1/chat/completions", json=body)).text
        events = [e.removeprefix("data: ") for e in text.split("\n\n") if e]
        assert events[-1] == "[DONE]"
        usage = json.loads(events[-2])
        assert usage["choices"] == [] and usage["usage"]["completion_tokens"] == 4
        assert json.loads(events[-3])["choices"][0]["finish_reason"] == "length"
        models = (await client.get(f"{sim.url}/v1/models")).json()
        assert models["data"][0]["id"] == "demo-llama"


async def test_errors_have_openais_shape_with_an_integer_code(simulator) -> None:
    sim = simulator()
    async with httpx.AsyncClient() as client:
        bad = await client.post(f"{sim.url}/v1/completions", json={"prompt": "x", "max_tokens": 0})
        missing = await client.post(
            f"{sim.url}/v1/completions", json={"model": "nope", "prompt": "x"}
        )
    assert bad.status_code == 400 and bad.json()["error"]["code"] == 400
    assert missing.status_code == 404 and missing.json()["error"]["param"] == "model"


async def test_a_repeated_prompt_hits_the_prefix_cache() -> None:
    engine = Engine(EngineConfig(speed=1000.0, block_tokens=4))
    prompt = tokenize("one two three four five six seven eight nine ten")
    first = engine.add(Sequence(list(prompt), max_tokens=1))
    await engine.step_once()
    second = engine.add(Sequence(list(prompt), max_tokens=1))
    await engine.step_once()
    assert (first.cached_tokens, second.cached_tokens) == (0, 8)
    assert engine.stats.prefix_hits == 8 and engine.stats.prefix_queries == 20
