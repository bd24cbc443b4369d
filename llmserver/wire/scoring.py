"""Body validation for the scoring endpoints of a pooling model, as vLLM 0.32 defines them:
`POST /v1/rerank` (a query against documents, Jina's and Cohere's shape) and `POST /v1/score`
(pairs of texts), read in `vllm/entrypoints/pooling/scoring/protocol.py` (`RerankRequest`, the
four `ScoreRequest` shapes) and `scoring/utils.py` (`validate_score_input`: 1:1, 1:N or N:N).

What vLLM refuses before its engine runs is refused here with its words, in OpenAI's error
shape; the rest (token limits against the model's context, multimodal parts for a text-only
model) only the engine knows, and its 400 reaches the client as it is. Like embeddings, each is
counted by its input tokens, never streamed, and generates nothing.
"""

from __future__ import annotations

from typing import Any

from llmserver.wire.errors import invalid
from llmserver.wire.validation import GATEWAY_OWNED, CompletionRequest, check_model, check_user
from tenants.endpoints import Endpoint

# The field pairs a score request may name its two sides by, in the order vLLM's union tries
# them (`ScoreRequest` in `scoring/protocol.py`).
SCORE_PAIRS = (
    ("queries", "documents"),
    ("queries", "items"),
    ("data_1", "data_2"),
    ("text_1", "text_2"),
)
# Integer fields and the least value vLLM's pydantic models accept for each.
_LEAST = {
    "top_n": 0,
    "max_tokens_per_query": 0,
    "max_tokens_per_doc": 0,
    "truncate_prompt_tokens": -1,
}


def _text(item: Any, name: str) -> str:
    """One input's text, for the estimate: a string, or a `{"content": [parts]}` whose text
    parts count (`ScoreMultiModalParam`); anything else is refused as vLLM's model refuses it."""
    if isinstance(item, str):
        return item
    if isinstance(item, dict) and isinstance(item.get("content"), list):
        parts = item["content"]
        return "".join(
            p["text"] for p in parts if isinstance(p, dict) and isinstance(p.get("text"), str)
        )
    raise invalid(f"'{name}' must be a string or an object with a 'content' list.", name)


def _side(data: dict[str, Any], name: str, many: bool = True) -> list[str]:
    """A side's texts: one input, or (where `many`) a list of them."""
    if name not in data:
        raise invalid(f"'{name}' is required.", name)
    value = data[name]
    if many and isinstance(value, list):
        return [_text(item, name) for item in value]
    return [_text(value, name)]


def _counts(first: list[str], second: list[str]) -> None:
    """`_validate_score_input_lens` in `scoring/utils.py`, with its words."""
    if len(first) > 1 and len(first) != len(second):
        raise invalid("Input lengths must be either 1:1, 1:N or N:N")
    if not first:
        raise invalid("At least one text element must be given")
    if not second:
        raise invalid("At least one text_pair element must be given")


def _integers(data: dict[str, Any]) -> None:
    for name, least in _LEAST.items():
        value = data.get(name)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise invalid(f"'{name}' must be an integer of at least {least}.", name)


def _request(
    kind: Endpoint, data: dict[str, Any], model: str, texts: list[str]
) -> CompletionRequest:
    _integers(data)
    check_user(data)
    body = {k: v for k, v in data.items() if k not in GATEWAY_OWNED}
    return CompletionRequest(
        kind=kind,
        model=model,
        stream=False,
        include_usage=False,
        max_tokens=0,
        # Each text once, as a bi-encoder counts them; a cross-encoder counts the query once
        # per document, which the engine's usage corrects when it ends.
        prompt_chars=sum(len(t) for t in texts),
        prefix_blocks=(),
        wants_flex=False,
        body=body,
    )


def validate_rerank(data: dict[str, Any]) -> CompletionRequest:
    """`query` (one input) and `documents` (one or a list); `top_n` 0 means all of them."""
    model = check_model(data)
    query = _side(data, "query", many=False)
    documents = _side(data, "documents")
    _counts(query, documents)
    return _request(Endpoint.RERANK, data, model, query + documents)


def validate_score(data: dict[str, Any]) -> CompletionRequest:
    """Two sides under one of vLLM's pairs of names, each one input or a list of them."""
    model = check_model(data)
    pair = next((p for p in SCORE_PAIRS if p[0] in data and p[1] in data), None)
    if pair is None:
        names = ", ".join(f"'{a}' and '{b}'" for a, b in SCORE_PAIRS)
        raise invalid(f"A score request names its two sides by one of: {names}.")
    first, second = _side(data, pair[0]), _side(data, pair[1])
    _counts(first, second)
    return _request(Endpoint.SCORE, data, model, first + second)
