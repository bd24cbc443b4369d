"""Helpers for the simulator's endpoint tests: reading server-sent events, holding a stream open,
and the engine's counters."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx

from simulator.launcher import RunningSimulator


def sse_events(text: str) -> list[tuple[str | None, str]]:
    """(the `event:` line's name or None, the data) for each event of a stream."""
    events = []
    for block in text.split("\n\n"):
        if not block.strip():
            continue
        name, data = None, []
        for line in block.split("\n"):
            if line.startswith("event: "):
                name = line.removeprefix("event: ")
            elif line.startswith("data: "):
                data.append(line.removeprefix("data: "))
        events.append((name, "\n".join(data)))
    return events


def sse_json(text: str) -> list[tuple[str | None, Any]]:
    """The events' data parsed as JSON (`[DONE]` kept as the string)."""
    return [
        (name, data if data == "[DONE]" else json.loads(data)) for name, data in sse_events(text)
    ]


async def hold_stream(
    client: httpx.AsyncClient, url: str, body: dict[str, Any], started: asyncio.Event
) -> None:
    """Stream `body` to `url` until cancelled; `started` is set at the first bytes."""
    async with client.stream("POST", url, json=body) as response:
        async for _ in response.aiter_raw():
            started.set()


async def sample(
    client: httpx.AsyncClient, sim: RunningSimulator, name: str, **labels: str
) -> float:
    """The value of the vLLM sample `name` whose labels include `labels`."""
    text = (await client.get(sim.metrics_url)).text
    for line in text.splitlines():
        if not line.startswith(name + "{") and not line.startswith(name + " "):
            continue
        if all(f'{k}="{v}"' in line for k, v in labels.items()):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError(f"no sample {name} {labels}")
