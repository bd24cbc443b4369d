"""Body validation for the two other APIs agents and coding tools speak: OpenAI's Responses API
(`POST /v1/responses`) and Anthropic's Messages API (`POST /v1/messages`), the subset vLLM serves
(`vllm/entrypoints/openai/responses/protocol.py`, `vllm/entrypoints/anthropic/protocol.py`).

What the gateway needs of them is what it needs of a chat: the model, whether it streams, its
answer's maximum, an estimate of its prompt and the prompt's leading blocks. Fields it does not
know pass through to the engine, which refuses what it does not serve.
"""

from __future__ import annotations

from typing import Any

from llmserver.wire.errors import invalid
from llmserver.wire.validation import (
    GATEWAY_OWNED,
    CompletionRequest,
    TokenLimits,
    check_max_tokens,
    check_model,
    check_service_tier,
    check_user,
)
from scheduling.prefix_index import block_hashes
from tenants.endpoints import Endpoint

MAX_DEPTH = 8  # how deep a content tree is searched for text (the estimate only)


def _texts(value: Any, depth: int = 0) -> list[str]:
    """The strings of a message or item tree, for the prompt estimate and the prefix."""
    if isinstance(value, str):
        return [value]
    if depth >= MAX_DEPTH:
        return []
    if isinstance(value, list):
        return [t for v in value for t in _texts(v, depth + 1)]
    if isinstance(value, dict):
        return [t for k, v in value.items() if k != "type" for t in _texts(v, depth + 1)]
    return []


def _stream(data: dict[str, Any]) -> bool:
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise invalid("'stream' must be a boolean.", "stream")
    return stream


def _request(
    kind: Endpoint,
    data: dict[str, Any],
    model: str,
    text: str,
    sent: int | None,
    limits: TokenLimits,
) -> CompletionRequest:
    tier = check_service_tier(data)
    body = {k: v for k, v in data.items() if k not in GATEWAY_OWNED}
    return CompletionRequest(
        kind=kind,
        model=model,
        stream=_stream(data),
        include_usage=False,
        max_tokens=sent if sent is not None else min(limits.default, limits.limit),
        prompt_chars=len(text),
        prefix_blocks=block_hashes(text),
        wants_flex=tier == "flex",
        body=body,
        service_tier=tier,
    )


# Sent to no engine: the gateway keeps the Responses state (llmserver/pipeline/responses.py) and
# makes each response's id, which is also the engine's request id where it reads `request_id`.
RESPONSES_STATE = ("previous_response_id", "store", "request_id")
MAX_RESPONSE_ID_CHARS = 64


def responses_prompt(body: dict[str, Any]) -> str:
    """The text of a Responses request's prompt, for its estimate and prefix."""
    return "\n".join([body.get("instructions") or "", *_texts(body.get("input"))])


def _responses_state(data: dict[str, Any]) -> tuple[str | None, bool]:
    previous = data.get("previous_response_id")
    if previous is not None and not (
        isinstance(previous, str) and 0 < len(previous) <= MAX_RESPONSE_ID_CHARS
    ):
        raise invalid(
            f"'previous_response_id' must be a response id (at most {MAX_RESPONSE_ID_CHARS} "
            "characters).",
            "previous_response_id",
        )
    store = data.get("store", True)  # OpenAI keeps a response unless told not to
    if not isinstance(store, bool):
        raise invalid("'store' must be a boolean.", "store")
    return previous, store


def validate_responses(data: dict[str, Any], limits: TokenLimits) -> CompletionRequest:
    """`input` (a string or a list of items) and `instructions`; `max_output_tokens` is the
    answer's maximum (absent: the engine's own, or the tier's maximum where it has one).
    `previous_response_id` and `store` are the gateway's to serve: the engine is sent
    `store: false` and the whole conversation instead."""
    model = check_model(data)
    given = data.get("input")
    if not (isinstance(given, str) and given) and not (isinstance(given, list) and given):
        raise invalid("'input' must be a non-empty string or a non-empty list of items.", "input")
    instructions = data.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise invalid("'instructions' must be a string.", "instructions")
    field = "max_output_tokens"
    _, asked = check_max_tokens(data, limits, (field,))
    check_user(data)
    previous, store = _responses_state(data)
    sent = asked if asked is not None else limits.tier
    req = _request(Endpoint.RESPONSES, data, model, responses_prompt(data), sent, limits)
    if sent is not None:
        req.body[field] = sent
    for name in RESPONSES_STATE:
        req.body.pop(name, None)
    req.body["store"] = False
    req.previous_response_id, req.store = previous, store
    return req


def validate_messages(data: dict[str, Any], limits: TokenLimits) -> CompletionRequest:
    """Anthropic's request: `max_tokens` is required, `messages` alternate user and assistant
    turns (strings or content blocks), `system` is a string or blocks."""
    model = check_model(data)
    if data.get("max_tokens") is None:
        raise invalid("'max_tokens' is required.", "max_tokens")
    _, asked = check_max_tokens(data, limits, ("max_tokens",))
    messages = data.get("messages")
    if not isinstance(messages, list) or not messages:
        raise invalid("'messages' must be a non-empty list of message objects.", "messages")
    for i, message in enumerate(messages):
        if not isinstance(message, dict) or message.get("role") not in ("user", "assistant"):
            raise invalid(
                f"'messages[{i}]' must be an object whose role is user or assistant.",
                f"messages[{i}]",
            )
        if not isinstance(message.get("content"), str | list):
            raise invalid(
                f"'messages[{i}].content' must be a string or a list of content blocks.",
                f"messages[{i}].content",
            )
    system = data.get("system")
    if system is not None and not isinstance(system, str | list):
        raise invalid("'system' must be a string or a list of content blocks.", "system")
    text = "\n".join([*_texts(system), *_texts(messages)])
    return _request(Endpoint.MESSAGES, data, model, text, asked, limits)
