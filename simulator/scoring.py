"""POST /v1/rerank and /v1/score as vLLM 0.32 serves them for an embedding model (a
bi-encoder: each text embedded alone, each pair scored by the cosine of its two vectors).

Read in vLLM 0.32: the routes in `vllm/entrypoints/pooling/scoring/api_router.py` (/score and
/v1/score, /rerank, /v1/rerank and /v2/rerank; registered for an "embed" model by
`register_pooling_api_routers` in `pooling/factories.py`, `enable_scoring_api` in
`pooling/utils.py`); the requests and responses in `pooling/scoring/protocol.py`; the checks in
`pooling/scoring/utils.py` and `io_processor.py`; the answers in `pooling/scoring/serving.py`.

- Rerank: `query` (one input) against `documents` (one or a list); `top_n` (>= 0, 0: all)
  keeps the best; results sorted by `relevance_score`, highest first, each with its `index` in
  `documents` and the `document` as `{"text", "multi_modal": null}`. No `object`, no `created`;
  usage is `{"prompt_tokens", "total_tokens"}` (`RerankUsage`).
- Score: two sides under one of `queries`/`documents`, `queries`/`items`, `data_1`/`data_2`,
  `text_1`/`text_2`, each one input or a list; pairs 1:1, 1:N or N:N, else 400 "Input lengths
  must be either 1:1, 1:N or N:N"; an empty side is a 400 of its own. Data is
  `[{"index", "object": "score", "score"}]` in pair order; usage is `UsageInfo` dumped whole.
  A body naming no pair fails every shape of vLLM's union; the simulator names the first
  shape's missing field (vLLM lists each shape's).
- Each text is its own engine request (`BiEncoderIOProcessor.get_request_factory_online`): a
  batch slot for its prefill step, nothing generated; a query is embedded once however many
  documents it meets. `prompt_tokens` sums every text's tokens (`_build_response`).
- `max_tokens_per_query` and `max_tokens_per_doc` (0: none) cut each side's texts to that many
  tokens; a negative one, or one not below the context, is a 400 (`_validate_token_limit`). A
  text longer than the context is the renderer's 400, as for embeddings.
- `{"content": [...]}` inputs are multimodal: the simulator's model is text only, so 400
  "MultiModalParam is not supported for <architecture>" (`_validate_mm_score_input`).
- The id is `score-<uuid>` for both (`ServingScores.request_id_prefix`); the model name is not
  checked (`PoolingBaseServing._check_model`), and the body names the served model.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass
from typing import Any

from simulator.embeddings import embed
from simulator.protocol import (
    ModelSpec,
    RequestError,
    check_context,
    int_field,
    json_body,
    missing,
    tokenize,
    validation_error,
    vllm_error,
)

ARCHITECTURE = "SimulatorForEmbedding"
SCORE_PAIRS = (
    ("queries", "documents"),
    ("queries", "items"),
    ("data_1", "data_2"),
    ("text_1", "text_2"),
)


@dataclass(frozen=True, slots=True)
class ScoringRequest:
    rerank: bool
    queries: list[list[str]]  # each text's tokens, after the per-side cut
    documents: list[list[str]]
    texts: list[str]  # the documents as sent, for rerank's answer
    top_n: int = 0
    priority: int = 0


def _inputs(body: dict[str, Any], field: str, many: bool) -> list[Any]:
    """A side as pydantic reads it: strings, or objects with `content` (multimodal)."""
    value = body.get(field)
    if field not in body:
        raise missing(field, body)
    items = value if many and isinstance(value, list) else [value]
    for item in items:
        if not isinstance(item, str) and not (isinstance(item, dict) and "content" in item):
            raise validation_error(field, "string_type", "Input should be a valid string", item)
    return items


def _text_only(items: list[Any]) -> list[str]:
    if any(not isinstance(item, str) for item in items):
        raise vllm_error(f"MultiModalParam is not supported for {ARCHITECTURE}")
    return items


def _limit(body: dict[str, Any], field: str, spec: ModelSpec) -> int:
    value = int_field(body, field, 0) or 0
    if value < 0:
        raise RequestError(400, f"{field} must be a non-negative integer")
    if value >= spec.max_model_len:
        raise RequestError(
            400, f"{field} ({value}) must be less than max_model_len ({spec.max_model_len})."
        )
    return value


def _tokens(texts: list[str], limit: int, spec: ModelSpec) -> list[list[str]]:
    out = []
    for text in texts:
        tokens = tokenize(text) or ["<s>"]
        if limit:
            tokens = tokens[:limit]
        check_context(len(tokens), None, "max_tokens", spec.max_model_len)
        out.append(tokens)
    return out


def parse(raw: bytes, spec: ModelSpec, rerank: bool) -> ScoringRequest:
    body = json_body(raw)
    if rerank:
        first, second = _inputs(body, "query", False), _inputs(body, "documents", True)
    else:
        pair = next((p for p in SCORE_PAIRS if p[0] in body and p[1] in body), None)
        if pair is None:
            raise missing("queries" if "queries" not in body else "documents", body)
        first, second = _inputs(body, pair[0], True), _inputs(body, pair[1], True)
    top_n = int_field(body, "top_n", 0) or 0
    if top_n < 0:
        raise validation_error(
            "top_n", "greater_than_equal", "Input should be greater than or equal to 0", top_n
        )
    priority = int_field(body, "priority", 0) or 0
    first, second = _text_only(first), _text_only(second)
    if len(first) > 1 and len(first) != len(second):
        raise vllm_error("Input lengths must be either 1:1, 1:N or N:N")
    if not first:
        raise vllm_error("At least one text element must be given")
    if not second:
        raise vllm_error("At least one text_pair element must be given")
    per_query = _limit(body, "max_tokens_per_query", spec)
    per_doc = _limit(body, "max_tokens_per_doc", spec)
    return ScoringRequest(
        rerank,
        _tokens(first, per_query, spec),
        _tokens(second, per_doc, spec),
        second,
        top_n,
        priority,
    )


def prompts(req: ScoringRequest) -> list[list[str]]:
    """The engine requests: each query, then each document."""
    return req.queries + req.documents


def _scores(req: ScoringRequest) -> list[float]:
    queries = req.queries * len(req.documents) if len(req.queries) == 1 else req.queries
    return [
        sum(a * b for a, b in zip(embed(q), embed(d), strict=True))
        for q, d in zip(queries, req.documents, strict=True)
    ]


def respond(req: ScoringRequest, model: str) -> dict[str, Any]:
    rid = f"score-{uuid.uuid4().hex}"
    n_tokens = sum(len(p) for p in prompts(req))
    scores = _scores(req)
    if req.rerank:
        ranked = sorted(range(len(scores)), key=lambda i: scores[i], reverse=True)
        results = [
            {
                "index": i,
                "document": {"text": req.texts[i], "multi_modal": None},
                "relevance_score": scores[i],
            }
            for i in ranked
        ]
        top_n = req.top_n or len(results)
        return {
            "id": rid,
            "model": model,
            "usage": {"prompt_tokens": n_tokens, "total_tokens": n_tokens},
            "results": results[:top_n],
        }
    return {
        "id": rid,
        "object": "list",
        "created": int(time.time()),
        "model": model,
        "data": [{"index": i, "object": "score", "score": s} for i, s in enumerate(scores)],
        "usage": {
            "prompt_tokens": n_tokens,
            "total_tokens": n_tokens,
            "completion_tokens": 0,
            "prompt_tokens_details": None,
            "completion_tokens_details": None,
        },
    }
