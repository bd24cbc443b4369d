"""The simulator speaks vLLM's OpenAI-compatible dialect: usage chunk with `choices: []`,
`[DONE]`, `max_tokens` respected, errors in OpenAI's shape with an integer code; and its prefix
cache makes a repeated prompt cheaper."""

from __future__ import annotations

import json

import httpx

from simulator.engine import Engine, EngineConfig, Sequence
from simulator.prefix_cache import PrefixCache
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


async def test_the_last_prompt_token_is_always_computed_as_in_vllm() -> None:
    engine = Engine(EngineConfig(speed=1000.0, block_tokens=4))
    prompt = tokenize("one two three four five six seven eight")  # exactly two blocks
    engine.add(Sequence(list(prompt), max_tokens=1))
    await engine.step_once()
    again = engine.add(Sequence(list(prompt), max_tokens=1))
    await engine.step_once()
    assert again.cached_tokens == 4


def test_past_its_size_the_cache_keeps_a_prompts_head_and_drops_its_tail() -> None:
    cache = PrefixCache(capacity_blocks=3, block_tokens=1)
    cache.lookup_and_insert(["a", "b", "c", "x"])
    cache.lookup_and_insert(["d", "e"])
    assert cache.lookup_and_insert(["a", "b", "c", "y"]) == 1


def test_a_long_prompts_prefill_is_most_of_its_first_step_on_a_miss() -> None:
    """As on a GPU: a 4,000-token prompt's prefill dominates its time to first token; a prefix
    cache hit removes all but the last block of it."""
    engine = Engine(EngineConfig())
    miss, hit = engine.step_seconds(4000), engine.step_seconds(16)
    assert (miss - engine.step_seconds(0)) / miss >= 0.9
    assert miss >= 10 * hit
