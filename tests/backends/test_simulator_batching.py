"""The simulator on loopback batches like vLLM: at most max_num_seqs run, the rest wait, and a
client disconnect aborts its sequence and frees the slot."""

from __future__ import annotations

import asyncio
import contextlib

import httpx
from backend_helpers import counter, read_metrics, wait_for

LONG = {"model": "demo-llama", "prompt": "tell me a long story", "max_tokens": 5000, "stream": True}


async def _hold_stream(client: httpx.AsyncClient, url: str, started: asyncio.Event) -> None:
    async with client.stream("POST", f"{url}/v1/completions", json=LONG) as response:
        async for _ in response.aiter_raw():
            started.set()


async def test_a_third_request_waits_when_max_num_seqs_is_two(simulator) -> None:
    sim = simulator("--max-num-seqs", "2")
    async with httpx.AsyncClient(timeout=10) as client:
        streams = [
            asyncio.create_task(_hold_stream(client, sim.url, asyncio.Event())) for _ in range(3)
        ]

        async def two_run_one_waits() -> bool:
            m = await read_metrics(client, sim)
            return m.running == 2 and m.waiting == 1

        await wait_for(two_run_one_waits)
        for task in streams:
            task.cancel()
        await asyncio.gather(*streams, return_exceptions=True)


async def test_a_disconnect_aborts_the_sequence_and_frees_its_slot(simulator) -> None:
    sim = simulator("--max-num-seqs", "2")
    async with httpx.AsyncClient(timeout=10) as client:
        events = [asyncio.Event() for _ in range(3)]
        streams = [asyncio.create_task(_hold_stream(client, sim.url, e)) for e in events]

        async def two_streaming() -> bool:
            return sum(e.is_set() for e in events) == 2

        # Which two of the three arrive first is up to the network, not the order of the tasks.
        await wait_for(two_streaming, 10)
        running = [i for i, e in enumerate(events) if e.is_set()]
        [waiting] = [i for i, e in enumerate(events) if not e.is_set()]
        aborts = 'vllm:request_success_total{engine="0",finished_reason="abort"'
        assert await counter(client, sim, aborts) == 0
        streams[running[0]].cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await streams[running[0]]

        async def aborted_and_waiter_admitted() -> bool:
            m = await read_metrics(client, sim)
            return await counter(client, sim, aborts) == 1 and m.running == 2 and m.waiting == 0

        await wait_for(aborted_and_waiter_admitted)
        await asyncio.wait_for(events[waiting].wait(), 5)
        for task in streams:
            task.cancel()
        await asyncio.gather(*streams, return_exceptions=True)


async def test_running_count_drops_when_every_client_disconnects(simulator) -> None:
    sim = simulator("--max-num-seqs", "4")
    async with httpx.AsyncClient(timeout=10) as client:
        events = [asyncio.Event() for _ in range(2)]
        streams = [asyncio.create_task(_hold_stream(client, sim.url, e)) for e in events]
        await asyncio.wait_for(asyncio.gather(*(e.wait() for e in events)), 10)
        assert (await read_metrics(client, sim)).running == 2
        for task in streams:
            task.cancel()
        await asyncio.gather(*streams, return_exceptions=True)

        async def idle() -> bool:
            return (await read_metrics(client, sim)).running == 0

        await wait_for(idle)
