"""KV cache events: batches decoded as vLLM and SGLang encode them, refusals of what is not one,
the subscriber's sequence checks, and the simulator publishing what its prefix cache stores and
evicts, in the token ids its /tokenize gives."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Callable

import httpx
import msgspec
import pytest

from llmserver.backends.kv_events import KvEventSubscriber, MalformedBatch, decode_batch
from scheduling import (
    AllBlocksCleared,
    BlocksRemoved,
    BlocksStored,
    CacheEvent,
    token_block_hashes,
)
from scheduling.engine_cache import EngineCacheMirror
from scheduling.prefix_index import PrefixIndex
from simulator.launcher import free_port, start_simulator

pack = msgspec.msgpack.encode


def test_an_array_like_batch_decodes_as_vllm_sends_it() -> None:
    payload = pack(
        [
            1.5,
            [
                ["BlockStored", [b"h1", b"h2"], None, [1, 2, 3, 4], 2, None, "GPU"],
                ["BlockRemoved", [b"h0"], "GPU"],
                ["AllBlocksCleared"],
            ],
        ]
    )
    assert decode_batch(payload) == [
        BlocksStored((b"h1", b"h2"), None, (1, 2, 3, 4), 2),
        BlocksRemoved((b"h0",)),
        AllBlocksCleared(),
    ]


def test_trailing_defaults_left_out_and_int_hashes_decode() -> None:
    payload = pack([1.5, [["BlockStored", [7], 6, [1, 2], 2], ["BlockRemoved", [5]]], 0])
    assert decode_batch(payload) == [BlocksStored((7,), 6, (1, 2), 2), BlocksRemoved((5,))]


def test_a_map_encoded_batch_decodes() -> None:
    stored = {"type": "BlockStored", "block_hashes": [7], "parent_block_hash": None}
    stored |= {"token_ids": [1, 2], "block_size": 2, "medium": "GPU"}
    payload = pack({"ts": 1.5, "events": [stored, {"type": "AllBlocksCleared"}]})
    assert decode_batch(payload) == [BlocksStored((7,), None, (1, 2), 2), AllBlocksCleared()]


def test_blocks_offloaded_from_the_device_and_unknown_events_are_left_out() -> None:
    payload = pack(
        [
            1.5,
            [
                ["BlockStored", [7], None, [1, 2], 2, None, "CPU_PINNED"],
                ["BlockRemoved", [7], "DISK"],
                ["BlockTransferred", [7]],
            ],
        ]
    )
    assert decode_batch(payload) == []


def test_blocks_cached_for_an_adapter_are_left_out() -> None:
    payload = pack([1.5, [["BlockStored", [7], None, [1, 2], 2, 3, "GPU"]]])
    by_name = {"type": "BlockStored", "block_hashes": [7], "parent_block_hash": None}
    by_name |= {"token_ids": [1, 2], "block_size": 2, "lora_id": None, "lora_name": "sql"}
    assert decode_batch(payload) == decode_batch(pack([1.5, [by_name]])) == []


@pytest.mark.parametrize(
    "payload",
    [
        b"\xc1",  # not msgpack
        pack(3),
        pack([1.5, "events"]),
        pack([1.5, [[7, 8]]]),
        pack([1.5, [["BlockStored", "h1", None, [1, 2], 2]]]),
        pack([1.5, [["BlockStored", [1], None, ["a", "b"], 2]]]),
        pack([1.5, [["BlockStored", [1], None, [1, 2], 0]]]),
        pack([1.5, [["BlockStored", [1], 2.5, [1, 2], 2]]]),
        pack([1.5, [["BlockStored", [1], None, [2**31, 2], 2]]]),
    ],
)
def test_what_is_not_a_batch_of_events_is_refused(payload: bytes) -> None:
    with pytest.raises(MalformedBatch):
        decode_batch(payload)


def collecting() -> tuple[KvEventSubscriber, list[CacheEvent]]:
    got: list[CacheEvent] = []
    return KvEventSubscriber("b1", "tcp://127.0.0.1:1", lambda _, e: got.extend(e)), got


def frames(seq: int, events: list[list[object]]) -> list[bytes]:
    return [b"", seq.to_bytes(8, "big"), pack([1.5, events])]


def test_the_subscriber_counts_batches_it_missed_and_applies_the_rest() -> None:
    sub, got = collecting()
    sub.handle(frames(0, [["BlockRemoved", [1]]]))
    sub.handle(frames(3, [["BlockRemoved", [2]]]))
    assert (sub.received, sub.missed) == (2, 2)
    assert got == [BlocksRemoved((1,)), BlocksRemoved((2,))]


def test_a_sequence_that_starts_again_clears_what_the_old_engine_held() -> None:
    sub, got = collecting()
    sub.handle(frames(5, [["BlockRemoved", [1]]]))
    sub.handle(frames(0, [["BlockRemoved", [2]]]))
    assert got == [BlocksRemoved((1,)), AllBlocksCleared(), BlocksRemoved((2,))]
    assert sub.missed == 0


def test_a_batch_the_scheduler_cannot_take_is_counted_not_raised() -> None:
    def refuse(_: str, __: list[CacheEvent]) -> None:
        raise RuntimeError("refused")

    sub = KvEventSubscriber("b1", "tcp://127.0.0.1:1", refuse)
    sub.handle(frames(0, [["BlockRemoved", [1]]]))
    assert (sub.received, sub.malformed) == (1, 1)


async def test_an_endpoint_zeromq_refuses_is_retried_not_the_end() -> None:
    sub = KvEventSubscriber("b1", "tcp://*:5557", lambda _, __: None)
    task = asyncio.create_task(sub.run())
    await asyncio.sleep(0.2)
    try:
        assert not task.done()
    finally:
        task.cancel()


async def test_a_binding_subscriber_hears_a_publisher_that_connects() -> None:
    """vLLM given an endpoint without a wildcard connects to it: the gateway binds."""
    import zmq

    got: list[CacheEvent] = []
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    sub = KvEventSubscriber("b1", endpoint, lambda _, e: got.extend(e), bind=True)
    task = asyncio.create_task(sub.run())
    publisher = zmq.Context.instance().socket(zmq.PUB)
    publisher.setsockopt(zmq.LINGER, 0)
    publisher.connect(endpoint)
    try:
        async with asyncio.timeout(5):
            for seq in itertools.count():  # a PUB drops what it sends before it is connected
                publisher.send_multipart(frames(seq, [["BlockRemoved", [7]]]))
                await asyncio.sleep(0.05)
                if got:
                    break
        assert got[0] == BlocksRemoved((7,))
    finally:
        publisher.close()
        task.cancel()


def test_a_malformed_message_is_counted_and_applies_nothing() -> None:
    sub, got = collecting()
    sub.handle([b"", b"\x00" * 8])
    sub.handle([b"", (0).to_bytes(8, "big"), b"\xc1"])
    assert (sub.malformed, got) == (2, [])


PROMPT = "The quick brown fox jumps over the lazy dog near the river bank today. " * 8


@pytest.fixture
async def publishing() -> AsyncIterator[tuple[str, KvEventSubscriber, list[CacheEvent]]]:
    """A simulator with a 12-block prefix cache publishing its events, and a subscriber that
    binds (the simulator, as vLLM, connects to an endpoint without a wildcard)."""
    endpoint = f"tcp://127.0.0.1:{free_port()}"
    config = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": endpoint}
    sim = start_simulator(
        *("--kv-events-config", json.dumps(config), "--prefix-cache-blocks", "12"), speed=20
    )
    got: list[CacheEvent] = []
    sub = KvEventSubscriber("sim", endpoint, lambda _, e: got.extend(e), bind=True)
    task = asyncio.create_task(sub.run())
    try:
        yield sim.url, sub, got
    finally:
        task.cancel()
        sim.stop()


async def ask(url: str, prompt: str) -> list[int]:
    """Complete `prompt` once; its token ids by /tokenize."""
    async with httpx.AsyncClient(base_url=url) as client:
        body = {"model": "demo-llama", "prompt": prompt, "max_tokens": 1}
        (await client.post("/v1/completions", json=body)).raise_for_status()
        tokens = await client.post("/tokenize", json={"model": "demo-llama", "prompt": prompt})
        return list(tokens.json()["tokens"])


async def until(condition: Callable[[], bool], seconds: float = 5.0) -> None:
    async with asyncio.timeout(seconds):
        while not condition():
            await asyncio.sleep(0.02)


async def until_heard(url: str, sub: KvEventSubscriber) -> None:
    """A subscriber hears only what is published after it joined: prompt until it hears."""
    for i in range(50):
        await ask(url, f"warm up {i} " * 20)
        await asyncio.sleep(0.1)
        if sub.received:
            return
    raise AssertionError("no KV events heard")


async def test_the_simulator_publishes_the_blocks_it_caches_in_tokenize_ids(
    publishing: tuple[str, KvEventSubscriber, list[CacheEvent]],
) -> None:
    url, sub, got = publishing
    await until_heard(url, sub)
    got.clear()
    tokens = await ask(url, PROMPT)
    mirror, index = EngineCacheMirror(), PrefixIndex()
    full = len(tokens) // 16

    def mirrored_all() -> bool:
        mirror.apply("sim", got, index)
        got.clear()
        return index.matched("sim", token_block_hashes(tokens), 0.0) == full

    await until(mirrored_all)
    assert sub.missed == sub.malformed == 0


async def test_the_simulator_publishes_what_it_evicts(
    publishing: tuple[str, KvEventSubscriber, list[CacheEvent]],
) -> None:
    url, sub, got = publishing
    await until_heard(url, sub)
    mirror, index = EngineCacheMirror(), PrefixIndex()
    first = await ask(url, PROMPT)
    await until(lambda: any(isinstance(e, BlocksStored) for e in got))
    await ask(url, "Something else entirely, and long enough to fill the cache. " * 20)
    await until(lambda: any(isinstance(e, BlocksRemoved) for e in got))
    mirror.apply("sim", got, index)
    assert index.matched("sim", token_block_hashes(first), 0.0) == 0
