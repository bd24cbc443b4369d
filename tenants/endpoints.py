"""The API endpoints a request can come through: the one home of their names, recorded on each
usage row and declared per route (which of them a backend serves a model on). Plain, so that the
request path and the models share it without importing each other."""

from __future__ import annotations

from enum import StrEnum


class Endpoint(StrEnum):
    CHAT = "chat"  # POST /v1/chat/completions
    COMPLETIONS = "completions"  # POST /v1/completions
    EMBEDDINGS = "embeddings"  # POST /v1/embeddings
    RESPONSES = "responses"  # POST /v1/responses
    MESSAGES = "messages"  # POST /v1/messages (Anthropic's API)
    RERANK = "rerank"  # POST /v1/rerank (also /rerank, /v2/rerank: vLLM's names for it)
    SCORE = "score"  # POST /v1/score (also /score)


# The endpoints of a pooling model: they generate nothing, are billed by their input tokens and
# answer in one body (nothing reaches the client before it, so a pause restarts them).
POOLING = frozenset({Endpoint.EMBEDDINGS, Endpoint.RERANK, Endpoint.SCORE})


def parse_endpoints(text: str) -> frozenset[Endpoint]:
    """A route's comma-separated list, each name checked (ValueError names the unknown one)."""
    names = {part.strip() for part in text.split(",") if part.strip()}
    unknown = sorted(names - {e.value for e in Endpoint})
    if unknown:
        known = ", ".join(e.value for e in Endpoint)
        raise ValueError(f"unknown endpoint {unknown[0]!r}; known: {known}")
    return frozenset(Endpoint(name) for name in names)
