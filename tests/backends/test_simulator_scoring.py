"""POST /v1/rerank and /v1/score as vLLM 0.32 serves them for an embedding model (a
bi-encoder): each text run through the engine, pairs scored by the cosine of their vectors,
vLLM's checks and shapes; and the routes are missing (404) from a generation runner (see
simulator/scoring.py)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from endpoint_helpers import sample

from simulator.launcher import RunningSimulator, start_simulator


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    with start_simulator(speed=50) as running:
        yield running


async def post(sim: RunningSimulator, path: str, **body: object) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.post(f"{sim.url}{path}", json={"model": "demo-llama", **body})


async def rerank(sim: RunningSimulator, **body: object) -> httpx.Response:
    return await post(sim, "/v1/rerank", **body)


async def score(sim: RunningSimulator, **body: object) -> httpx.Response:
    return await post(sim, "/v1/score", **body)


async def test_rerank_orders_documents_by_relevance_with_their_indexes(sim) -> None:
    docs = ["a cat sat", "the quick brown fox", "quick brown fox jumps"]
    body = (await rerank(sim, query="the quick brown fox", documents=docs)).json()
    assert body["id"].startswith("score-") and body["model"] == "demo-llama"
    assert "object" not in body and "created" not in body
    scores = [r["relevance_score"] for r in body["results"]]
    assert scores == sorted(scores, reverse=True)
    assert body["results"][0]["index"] == 1
    assert body["results"][0]["document"] == {"text": docs[1], "multi_modal": None}
    assert abs(scores[0] - 1.0) < 1e-5


async def test_rerank_bills_the_query_once_and_each_document(sim) -> None:
    body = (await rerank(sim, query="one two", documents=["three", "four five six"])).json()
    assert body["usage"] == {"prompt_tokens": 6, "total_tokens": 6}


async def test_top_n_keeps_the_best_documents(sim) -> None:
    body = (await rerank(sim, query="x", documents=["a", "b", "c"], top_n=2)).json()
    assert len(body["results"]) == 2


async def test_vllms_other_rerank_paths_answer_the_same(sim) -> None:
    for path in ("/rerank", "/v2/rerank"):
        response = await post(sim, path, query="x", documents=["a"])
        assert response.status_code == 200 and len(response.json()["results"]) == 1


async def test_score_pairs_one_query_with_each_document_in_order(sim) -> None:
    body = (await score(sim, queries="alpha beta", documents=["alpha beta", "gamma"])).json()
    assert body["object"] == "list" and body["id"].startswith("score-")
    assert [(d["index"], d["object"]) for d in body["data"]] == [(0, "score"), (1, "score")]
    assert body["data"][0]["score"] > body["data"][1]["score"]
    assert body["usage"] == {
        "prompt_tokens": 5,
        "total_tokens": 5,
        "completion_tokens": 0,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }


async def test_score_takes_each_of_vllms_pairs_of_names(sim) -> None:
    for a, b in (("queries", "items"), ("data_1", "data_2"), ("text_1", "text_2")):
        response = await score(sim, **{a: ["x", "y"], b: ["y", "x"]})
        assert response.status_code == 200 and len(response.json()["data"]) == 2


async def test_unequal_sides_are_refused_as_vllm_refuses_them(sim) -> None:
    response = await score(sim, queries=["a", "b"], documents=["a", "b", "c"])
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "Input lengths must be either 1:1, 1:N or N:N"


async def test_no_documents_is_refused(sim) -> None:
    response = await rerank(sim, query="x", documents=[])
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "At least one text_pair element must be given"


async def test_a_missing_query_is_a_validation_error(sim) -> None:
    error = (await rerank(sim, documents=["a"])).json()["error"]
    assert (error["type"], error["param"]) == ("Bad Request", "body.query")


async def test_a_negative_top_n_is_a_validation_error(sim) -> None:
    error = (await rerank(sim, query="x", documents=["a"], top_n=-1)).json()["error"]
    assert (error["type"], error["param"]) == ("Bad Request", "body.top_n")


async def test_multimodal_input_is_refused_for_a_text_model(sim) -> None:
    image = {"content": [{"type": "image_url", "image_url": {"url": "http://x/y.png"}}]}
    response = await rerank(sim, query="x", documents=[image])
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("MultiModalParam is not supported")


async def test_max_tokens_per_doc_cuts_each_document(sim) -> None:
    body = (await rerank(sim, query="a", documents=["b c d e"], max_tokens_per_doc=2)).json()
    assert body["usage"]["prompt_tokens"] == 3


async def test_each_text_runs_through_the_engine(simulator) -> None:
    sim = simulator(speed=50)
    async with httpx.AsyncClient(timeout=10) as client:
        await client.post(f"{sim.url}/v1/score", json={"text_1": "a b", "text_2": ["c", "d"]})
        assert await sample(client, sim, "vllm:prompt_tokens_total") == 4


async def test_a_generation_runner_has_no_scoring_routes(simulator) -> None:
    sim = simulator("--runner", "generate", speed=50)
    async with httpx.AsyncClient(timeout=10) as client:
        for path in ("/v1/rerank", "/v1/score"):
            response = await client.post(f"{sim.url}{path}", json={"query": "x"})
            assert response.status_code == 404 and response.json() == {"detail": "Not Found"}
