"""Backends that fall short of what resuming uses. One that refuses to continue a paused stream
(a server that does not take `continue_final_message`): the paused stream ends with a clear
error event, billed what it delivered, and the gateway stops pausing streams on that backend,
saying why. One without `/tokenize` (a vLLM behind a proxy that passes only /v1): a resumed
stream is billed its original prompt all the same."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from asgiref.sync import sync_to_async

from simulator.launcher import free_port, start_simulator
from tenants.models import Backend
from tests.api.conftest import MODEL, chat_body, read_all, start, usage_rows, wait_for
from tests.api.test_preemption import (
    POWER_TOKENS,
    PROMPT_TOKENS,
    make_world,
    power_streams_running,
    rest_of,
    running_gateway,
)

Refusal = Callable[[str, bytes], web.Response | None]


def continuations(path: str, body: bytes) -> web.Response | None:
    """A continuation is answered with vLLM's 400 error shape."""
    if b"continue_final_message" in body and path != "/tokenize":
        error = {"message": "continue_final_message is not supported", "code": 400}
        return web.json_response({"error": error}, status=400)
    return None


def tokenize(path: str, body: bytes) -> web.Response | None:
    """There is no /tokenize."""
    return web.json_response({"detail": "Not Found"}, status=404) if path == "/tokenize" else None


@contextlib.asynccontextmanager
async def refusing(upstream: str, refuse: Refusal) -> AsyncIterator[str]:
    """A proxy to `upstream` that answers what `refuse` refuses itself."""
    session = aiohttp.ClientSession()

    async def proxy(request: web.Request) -> web.StreamResponse:
        body = await request.read()
        refusal = refuse(request.path, body)
        if refusal is not None:
            return refusal
        async with session.request(
            request.method, upstream + request.path_qs, data=body or None, headers=request.headers
        ) as answer:
            response = web.StreamResponse(status=answer.status)
            response.content_type = answer.content_type
            await response.prepare(request)
            async for chunk in answer.content.iter_any():
                await response.write(chunk)
            await response.write_eof()
            return response

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", proxy)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        await runner.cleanup()
        await session.close()


@pytest.fixture
def world(transactional_db: None, settings: Any) -> Iterator[Any]:
    sim = start_simulator("--max-num-seqs", "3", "--model", MODEL, "--speed", "4")
    try:
        yield make_world(sim, settings), sim
    finally:
        sim.stop()


@contextlib.asynccontextmanager
async def power_paused_behind(
    world: tuple[tuple[str, str], Any], refuse: Refusal
) -> AsyncIterator[tuple[Any, list[bytes]]]:
    """The narrow backend behind a proxy that refuses what `refuse` refuses; three power streams
    fill its slots and a light request pauses one. Yields the gateway and the power streams'
    remaining bodies, read to their ends."""
    (power_key, light_key), sim = world
    async with refusing(sim.url, refuse) as url:
        await sync_to_async(Backend.objects.filter(name="narrow").update)(
            base_url=url, metrics_url=sim.metrics_url
        )
        async with running_gateway() as gw:
            await wait_for(lambda: gw.snapshot().backends[0].gates[0].open, 5)
            power = await power_streams_running(gw, power_key, 3)
            status, _, _ = await read_all(await start(light_key, chat_body(max_tokens=4)), 30)
            assert status == 200
            yield gw, await asyncio.gather(*(rest_of(c) for c in power))


async def test_a_refused_continuation_ends_the_stream_clearly_and_stops_pausing_there(world):
    async with power_paused_behind(world, continuations) as (gw, bodies):
        errors = [
            json.loads(line[6:])["error"]
            for body in bodies
            for line in body.decode().split("\n")
            if line.startswith('data: {"error"')
        ]
        assert len(errors) == 1 and "refused to continue" in errors[0]["message"]
        assert gw.backends.cannot_resume == {"narrow"}
        assert gw.scheduler.core.backends["narrow"].config.preemption is False
        await wait_for(lambda: gw.usage.pending == 0, 5)
        rows = [r for r in await usage_rows() if r["user"] == "power"]
        assert sorted(r["status"] for r in rows) == ["error", "ok", "ok"]
        cut = next(r for r in rows if r["status"] == "error")
        assert 0 < cut["completion_tokens"] < 80


async def test_a_resumed_stream_on_a_backend_without_tokenize_is_billed_its_original_prompt(
    world,
):
    async with power_paused_behind(world, tokenize) as (gw, _):
        assert gw.scheduler.core.totals["preempted"] >= 1
        await wait_for(lambda: gw.usage.pending == 0, 5)
        rows = [r for r in await usage_rows() if r["user"] == "power"]
        assert [(r["prompt_tokens"], r["completion_tokens"]) for r in rows] == [
            (PROMPT_TOKENS, POWER_TOKENS)
        ] * 3
