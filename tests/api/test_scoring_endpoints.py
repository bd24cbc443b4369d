"""Rerank and score through the scheduler as embeddings go (queued in the principal's lane,
billed once by their input tokens under their endpoint), refused as vLLM refuses them."""

from __future__ import annotations

import json

from asgiref.sync import sync_to_async

from tenants.models import Backend, ModelRoute
from tests.api.conftest import MODEL, chat_body, read_all, start, usage_rows, wait_for

RERANKER = "demo-rerank"
DOCS = ["a cat sat", "the quick brown fox", "quick brown fox jumps"]


def add_reranker(url: str) -> None:
    backend = Backend.objects.create(name="reranker", base_url=url, kind="vllm")
    ModelRoute.objects.create(
        public_name=RERANKER,
        backend=backend,
        upstream_model=MODEL,
        endpoints="embeddings,rerank,score",
    )


async def reranker(gateway, world) -> None:
    await sync_to_async(add_reranker)(world["sim"].url)
    await gateway.reload_once()


def body(**fields: object) -> bytes:
    return json.dumps({"model": RERANKER, **fields}).encode()


async def test_a_rerank_is_served_through_the_queue_and_billed_once_by_its_input(gateway, world):
    await reranker(gateway, world)
    comm = await start(
        world["alice"], body(query="the quick brown fox", documents=DOCS), "/v1/rerank"
    )
    status, headers, raw = await read_all(comm)
    data = json.loads(raw)
    assert status == 200 and data["model"] == RERANKER and data["results"][0]["index"] == 1
    assert data["id"] == headers[b"x-request-id"].decode()
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert (row["endpoint"], row["status"], row["completion_tokens"]) == ("rerank", "ok", 0)
    assert row["prompt_tokens"] == data["usage"]["prompt_tokens"] == 4 + 3 + 4 + 4


async def test_a_score_is_billed_once_under_its_endpoint(gateway, world):
    await reranker(gateway, world)
    comm = await start(
        world["alice"], body(queries="alpha beta", documents=["alpha", "gamma"]), "/v1/score"
    )
    status, _, raw = await read_all(comm)
    data = json.loads(raw)
    assert status == 200 and [d["index"] for d in data["data"]] == [0, 1]
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert (row["endpoint"], row["prompt_tokens"]) == ("score", data["usage"]["prompt_tokens"])


async def test_vllms_own_paths_are_served_and_billed_as_their_endpoint(gateway, world):
    await reranker(gateway, world)
    calls = [
        ("/rerank", body(query="x", documents=["y"])),
        ("/v2/rerank", body(query="x", documents=["y"])),
        ("/score", body(text_1="x", text_2="y")),
    ]
    for path, payload in calls:
        status, _, _ = await read_all(await start(world["alice"], payload, path))
        assert status == 200
    await gateway.usage.flush_once()
    assert [r["endpoint"] for r in await usage_rows()] == ["rerank", "rerank", "score"]


async def test_a_rerank_waits_in_the_principals_lane_behind_their_running_chat(gateway, world):
    await sync_to_async(ModelRoute.objects.filter(public_name=MODEL).update)(
        endpoints="chat,rerank"
    )
    await gateway.reload_once()
    running = await start(world["alice"], chat_body(max_tokens=2000))
    assert (await running.receive_output(10))["status"] == 200
    queued = await start(
        world["alice"],
        json.dumps({"model": MODEL, "query": "x", "documents": ["y"]}).encode(),
        "/v1/rerank",
    )
    await wait_for(lambda: sum(q.depth for q in gateway.snapshot().queues) == 1, 5)
    assert await queued.receive_nothing(0.2)
    await running.send_input({"type": "http.disconnect"})
    status, _, _ = await read_all(queued)
    assert status == 200


async def test_a_rerank_without_documents_is_refused_in_openais_shape(gateway, world):
    await reranker(gateway, world)
    status, _, raw = await read_all(await start(world["alice"], body(query="x"), "/v1/rerank"))
    error = json.loads(raw)["error"]
    assert (status, error["type"], error["param"]) == (400, "invalid_request_error", "documents")


async def test_unequal_sides_of_a_score_are_refused_as_vllm_refuses_them(gateway, world):
    await reranker(gateway, world)
    payload = body(queries=["a", "b"], documents=["a", "b", "c"])
    status, _, raw = await read_all(await start(world["alice"], payload, "/v1/score"))
    error = json.loads(raw)["error"]
    assert (status, error["message"]) == (400, "Input lengths must be either 1:1, 1:N or N:N")


async def test_a_score_naming_no_pair_of_sides_is_refused(gateway, world):
    await reranker(gateway, world)
    status, _, raw = await read_all(await start(world["alice"], body(text_1="a"), "/v1/score"))
    assert status == 400 and "'text_1' and 'text_2'" in json.loads(raw)["error"]["message"]


async def test_the_engines_refusal_reaches_the_client_and_costs_nothing(gateway, world):
    await reranker(gateway, world)
    image = {"content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}
    payload = body(query="x", documents=[image])
    status, _, raw = await read_all(await start(world["alice"], payload, "/v1/rerank"))
    assert status == 400 and "MultiModalParam" in json.loads(raw)["error"]["message"]
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert (row["endpoint"], row["status"], float(row["cost"])) == ("rerank", "error", 0.0)


async def test_a_model_whose_backends_do_not_rerank_is_a_404_that_says_so(gateway, world):
    payload = json.dumps({"model": MODEL, "query": "x", "documents": ["y"]}).encode()
    status, _, raw = await read_all(await start(world["alice"], payload, "/v1/rerank"))
    error = json.loads(raw)["error"]
    assert (status, error["code"]) == (404, "model_not_found") and "rerank" in error["message"]
