"""Rerank and score against a real daphne (the `openai` SDK's raw POST, as RAG frameworks call
vLLM's rerank), each billed once under its endpoint by the engine's prompt tokens; and the
anthropic SDK's `messages.count_tokens`, answered and not billed."""

from __future__ import annotations

import anthropic
import httpx
import pytest

from llmserver.testing.processes import GatewayProcess
from tests.e2e.clients import rows_when

pytestmark = pytest.mark.e2e
MODEL = "demo-llama"
EMBEDDER = "demo-embed"  # the demo's pooling route: embeddings, rerank and score


def billed(gateway: GatewayProcess, ids: list[str]) -> dict[str, tuple[str, int]]:
    """request id -> (endpoint, prompt tokens) of every usage row, once those of `ids` are all
    written."""
    rows = rows_when(
        gateway, ("endpoint", "prompt_tokens"), lambda rows: set(ids) <= {r[0] for r in rows}
    )
    return {r[0]: (r[1], r[2]) for r in rows}


def post(gateway: GatewayProcess, path: str, body: dict[str, object]) -> httpx.Response:
    headers = {"authorization": f"Bearer {gateway.key('alice')}"}
    return httpx.post(gateway.url + path, json={"model": EMBEDDER, **body}, headers=headers)


def test_rerank_and_score_are_each_billed_once_under_their_endpoint(e2e_gateway):
    reranked = post(e2e_gateway, "/v1/rerank", {"query": "brown fox", "documents": ["a", "b c"]})
    scored = post(e2e_gateway, "/v1/score", {"queries": "brown fox", "documents": ["a", "b"]})
    assert (reranked.status_code, scored.status_code) == (200, 200)
    ids = [r.headers["x-request-id"] for r in (reranked, scored)]
    rows = billed(e2e_gateway, ids)
    assert [rows.get(i) for i in ids] == [
        ("rerank", reranked.json()["usage"]["prompt_tokens"]),
        ("score", scored.json()["usage"]["prompt_tokens"]),
    ]


def test_the_openai_sdk_posts_a_rerank_to_vllms_own_path(client):
    answer = client.post(
        "/rerank",
        body={"model": EMBEDDER, "query": "fox", "documents": ["fox", "cat"], "top_n": 1},
        cast_to=object,
    )
    assert isinstance(answer, dict) and [r["index"] for r in answer["results"]] == [0]


def test_a_refused_score_is_openais_error_shape(e2e_gateway):
    response = post(e2e_gateway, "/v1/score", {"queries": ["a", "b"], "documents": ["a"]})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "Input lengths must be either 1:1, 1:N or N:N"


def test_anthropics_sdk_counts_a_messages_tokens_without_a_bill(e2e_gateway):
    with anthropic.Anthropic(
        base_url=e2e_gateway.url, api_key=e2e_gateway.key("alice"), max_retries=0, timeout=30
    ) as claude:
        raw = claude.messages.with_raw_response.count_tokens(
            model=MODEL, messages=[{"role": "user", "content": "How many tokens is this?"}]
        )
    assert raw.parse().input_tokens > 0
    # A billed request after it: once its row is written, the count's would have been too.
    after = post(e2e_gateway, "/v1/score", {"text_1": "a", "text_2": "b"})
    rows = billed(e2e_gateway, [after.headers["x-request-id"]])
    assert after.headers["x-request-id"] in rows and raw.headers["request-id"] not in rows
