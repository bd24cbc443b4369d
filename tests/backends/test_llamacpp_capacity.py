"""llama-server's capacity (its slots) and health, read from the server itself."""

from __future__ import annotations

import httpx

from llmserver.backends.llamacpp import capacity_from_props, is_healthy, read_capacity


def server(props: httpx.Response, slots: httpx.Response, health: int = 200) -> httpx.AsyncClient:
    def handler(request: httpx.Request) -> httpx.Response:
        return {"/props": props, "/slots": slots}.get(request.url.path) or httpx.Response(health)

    return httpx.AsyncClient(transport=httpx.MockTransport(handler))


async def test_capacity_is_the_total_slots_the_server_reports():
    client = server(httpx.Response(200, json={"total_slots": 4}), httpx.Response(501))
    assert await read_capacity(client, "http://llama/") == 4


async def test_without_total_slots_it_counts_the_slots():
    slots = [{"id": i, "is_processing": False} for i in range(3)]
    client = server(httpx.Response(404), httpx.Response(200, json=slots))
    assert await read_capacity(client, "http://llama") == 3


async def test_a_server_that_tells_nothing_has_no_known_capacity():
    client = server(httpx.Response(200, json={"total_slots": "4"}), httpx.Response(501))
    assert await read_capacity(client, "http://llama") is None
    assert capacity_from_props({"total_slots": True}) is None
    assert capacity_from_props([4]) is None


async def test_an_unreachable_server_has_no_known_capacity_and_is_not_healthy():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    client = httpx.AsyncClient(transport=httpx.MockTransport(refuse))
    assert await read_capacity(client, "http://llama") is None
    assert not await is_healthy(client, "http://llama")


async def test_health_is_ready_only_once_the_model_is_loaded():
    loading = server(httpx.Response(501), httpx.Response(501), health=503)
    assert not await is_healthy(loading, "http://llama")
    ready = server(httpx.Response(501), httpx.Response(501), health=200)
    assert await is_healthy(ready, "http://llama")


async def test_the_poller_reports_the_servers_slots_with_its_metrics_and_rereads_after_a_failure():
    from functools import partial

    from llmserver.backends.metrics import MetricsPoller
    from tests.backends.backend_helpers import fixture_text

    answers = {"slots": 4, "up": True}

    def handler(request: httpx.Request) -> httpx.Response:
        if not answers["up"]:
            raise httpx.ConnectError("refused", request=request)
        if request.url.path == "/props":
            return httpx.Response(200, json={"total_slots": answers["slots"]})
        return httpx.Response(200, text=fixture_text("llamacpp.txt"))

    client = httpx.AsyncClient(transport=httpx.MockTransport(handler))
    seen = []
    poller = MetricsPoller(
        "llama",
        "llamacpp",
        "http://llama/metrics",
        client,
        lambda _name, metrics: seen.append(metrics),
        read_capacity=partial(read_capacity, client, "http://llama"),
    )
    assert (await poller.scrape_once()).capacity == 4
    answers.update(up=False)
    assert await poller.scrape_once() is None
    answers.update(up=True, slots=8)  # restarted with -np 8
    assert (await poller.scrape_once()).capacity == 8
