"""POST /v1/messages (Anthropic's Messages API) as vLLM 0.32 serves it, the text-only subset,
and POST /v1/messages/count_tokens.

Read in vLLM 0.32: the routes in `vllm/entrypoints/anthropic/api_router.py`; the request,
response and event models in `anthropic/protocol.py`; the conversion to a chat completion and
back in `anthropic/serving.py` (`to_chat_completion_request`, `messages_full_converter`,
`message_stream_converter`, `_build_anthropic_usage`, `_to_anthropic_stop_reason`,
`count_tokens`).

- vLLM turns the request into a chat completion (`system` first as a system message; text blocks
  joined; `max_tokens` as both `max_tokens` and `max_completion_tokens`; a stream asks for
  `include_usage` and `continuous_usage_stats`) and runs it as one, so it takes the chat's
  checks, its prompt and its token counts, and its id ("chatcmpl-...").
- Body: `{"id", "type": "message", "role": "assistant", "content": [{"type": "text", "text"}],
  "model", "stop_reason", "usage": {"input_tokens", "output_tokens"}}` (`model_dump(
  exclude_none=True)`: no `stop_sequence` when null). `stop_reason` is "max_tokens" for a
  length cut and "end_turn" for the model's own end.
- Stream, each as `event: <type>` then `data: <json>`: `message_start` (the message with empty
  content and `usage: {"input_tokens": prompt, "output_tokens": 0}`), at the first text
  `content_block_start` (`{"type": "text", "text": ""}`, index 0), a `content_block_delta`
  (`text_delta`) per token, then `content_block_stop`, `message_delta` (`delta: {"stop_reason",
  "stop_sequence": null}` and the final `usage` with `output_tokens`) and `message_stop`. No
  `ping` and no `[DONE]`.
- `max_tokens` is required, so in the simulator's default `natural_stop` every answer runs to
  it (stop_reason "max_tokens"); with `natural_stop="always"` answers end on their own
  ("end_turn").
- Errors: an error the handler returns is translated to Anthropic's shape, `{"type": "error",
  "error": {"type", "message"}}`, with the OpenAI error's type name ("BadRequestError",
  "NotFoundError"), not Anthropic's ("invalid_request_error"), and the same status
  (`translate_error_response`). A body that fails pydantic's validation (no `max_tokens`,
  `max_tokens` below 1, no `messages`, a bad role) never reaches the handler: FastAPI's
  validation handler answers it in OpenAI's shape, `{"error": {"message", "type": "Bad
  Request", "param": "body.max_tokens", "code": 400}}`.
- Tools, images, thinking and stop sequences are not modelled (blocks other than text are
  dropped from the prompt).
"""

from __future__ import annotations

from typing import Any

from simulator.protocol import (
    ChoiceResult,
    ModelSpec,
    RequestError,
    SimRequest,
    bool_field,
    chat_prompt,
    check_context,
    check_sampling,
    event,
    float_field,
    get_max_tokens,
    int_field,
    json_body,
    missing,
    next_id,
    tokenize,
    validation_error,
    value_error,
)

ROLES = ("user", "assistant", "system")
BLOCK_TYPES = (
    "text",
    "image",
    "tool_use",
    "tool_result",
    "tool_reference",
    "thinking",
    "redacted_thinking",
    "tool_addition",
    "tool_removal",
)


def error_body(exc: RequestError) -> dict[str, Any]:
    """Anthropic's error shape for what the handler refuses; OpenAI's for pydantic's refusals."""
    if exc.is_validation:
        return exc.body()
    return {"type": "error", "error": {"type": exc.kind, "message": exc.message}}


def _text(content: Any, field: str) -> str:
    """A message's or system's text: a string, or its text blocks joined."""
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        msg = "Input should be a valid string or a valid list"
        raise validation_error(field, "union_type", msg, content)
    parts = []
    for i, block in enumerate(content):
        if not isinstance(block, dict) or block.get("type") not in BLOCK_TYPES:
            value = block.get("type") if isinstance(block, dict) else block
            raise validation_error(
                f"{field}.{i}.type", "literal_error", "Input should be 'text'", value
            )
        if block["type"] == "text" and block.get("text"):
            parts.append(str(block["text"]))
    return "".join(parts)


def _chat_messages(body: dict[str, Any]) -> list[dict[str, Any]]:
    """`_convert_system_message` and `_convert_messages`: the chat completion's messages."""
    if body.get("messages") is None:
        raise missing("messages", body)
    if not isinstance(body["messages"], list):
        raise validation_error(
            "messages", "list_type", "Input should be a valid list", body["messages"]
        )
    out: list[dict[str, Any]] = []
    system = body.get("system")
    if system:
        text = _text(system, "system")
        if text:
            out.append({"role": "system", "content": text})
    for i, msg in enumerate(body["messages"]):
        if not isinstance(msg, dict):
            raise validation_error(
                f"messages.{i}",
                "model_type",
                "Input should be a valid dictionary or instance of AnthropicMessage",
                msg,
            )
        if msg.get("role") not in ROLES:
            msg_ = "Input should be 'user', 'assistant' or 'system'"
            raise validation_error(f"messages.{i}.role", "literal_error", msg_, msg.get("role"))
        if "content" not in msg:
            raise missing(f"messages.{i}.content", msg)
        text = _text(msg["content"], f"messages.{i}.content")
        if msg["role"] == "system" and not text:
            continue
        out.append({"role": msg["role"], "content": text})
    return out


def _model(body: dict[str, Any]) -> None:
    if "model" not in body:
        raise missing("model", body)
    if not isinstance(body["model"], str):
        raise validation_error(
            "model", "string_type", "Input should be a valid string", body["model"]
        )
    if not body["model"]:
        raise value_error("model", "Model is required", body["model"])


def parse(raw: bytes, spec: ModelSpec) -> tuple[SimRequest, MessagesStream]:
    body = json_body(raw)
    _model(body)
    chat_messages = _chat_messages(body)
    if "max_tokens" not in body or body["max_tokens"] is None:
        raise missing("max_tokens", body)
    max_tokens = int_field(body, "max_tokens", None) or 0
    if max_tokens <= 0:
        raise value_error("max_tokens", "max_tokens must be positive", body["max_tokens"])
    temperature = float_field(body, "temperature")
    stream = bool_field(body, "stream", False)
    # The chat completion's checks: its model, its context, its sampling parameters.
    spec.check_model(body)
    prompt_tokens = tokenize(chat_prompt(chat_messages)) or ["<s>"]
    check_context(len(prompt_tokens), max_tokens, "max_completion_tokens", spec.max_model_len)
    limit = get_max_tokens(len(prompt_tokens), max_tokens, spec.max_model_len)
    check_sampling(1, temperature, limit)
    req = SimRequest(
        chat=True,
        prompt_tokens=prompt_tokens,
        max_tokens=limit,
        priority=0,  # the Anthropic request has no priority field (unknown fields are ignored)
        stream=stream,
        include_usage=True,
        stop_at=spec.stops(prompt_tokens, 1, True, False),
    )
    return req, MessagesStream(req, spec.name)


def count_tokens(raw: bytes, spec: ModelSpec) -> dict[str, Any]:
    """`count_tokens`: the chat prompt's length, with `context_management`."""
    body = json_body(raw)
    _model(body)
    chat_messages = _chat_messages(body)
    spec.check_model(body)
    n = len(tokenize(chat_prompt(chat_messages)) or ["<s>"])
    return {"input_tokens": n, "context_management": {"original_input_tokens": n}}


def stop_reason(finish_reason: str) -> str:
    """`_to_anthropic_stop_reason` for an answer without tools or stop strings."""
    return "max_tokens" if finish_reason == "length" else "end_turn"


class MessagesStream:
    """One request's events and body (the app's `Formatter`)."""

    content_type = b"text/event-stream; charset=utf-8"

    def __init__(self, req: SimRequest, model: str) -> None:
        self.req, self.model = req, model
        self.id = next_id("chatcmpl")
        self.opened = False

    def start(self) -> list[bytes]:
        message: dict[str, Any] = {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": self.model,
            "stop_reason": None,
            "stop_sequence": None,
            "usage": self._usage(0),
        }
        return [event("message_start", {"type": "message_start", "message": message})]

    def _usage(self, output_tokens: int) -> dict[str, int]:
        return {"input_tokens": len(self.req.prompt_tokens), "output_tokens": output_tokens}

    def delta(self, index: int, text: str, finish: str | None) -> list[bytes]:
        out: list[bytes] = []
        if not text:
            return out
        if not self.opened:
            self.opened = True
            block = {
                "type": "content_block_start",
                "content_block": {"type": "text", "text": ""},
                "index": 0,
            }
            out.append(event("content_block_start", block))
        delta = {
            "type": "content_block_delta",
            "delta": {"type": "text_delta", "text": text},
            "index": 0,
        }
        return [*out, event("content_block_delta", delta)]

    def end(self, results: list[ChoiceResult]) -> list[bytes]:
        out = []
        if self.opened:
            out.append(event("content_block_stop", {"type": "content_block_stop", "index": 0}))
        result = results[0]
        delta = {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason(result.finish_reason), "stop_sequence": None},
            "usage": self._usage(result.tokens),
        }
        return [
            *out,
            event("message_delta", delta),
            event("message_stop", {"type": "message_stop"}),
        ]

    def full(self, results: list[ChoiceResult]) -> dict[str, Any]:
        result = results[0]
        return {
            "id": self.id,
            "type": "message",
            "role": "assistant",
            "content": [{"type": "text", "text": result.text}],
            "model": self.model,
            "stop_reason": stop_reason(result.finish_reason),
            "usage": self._usage(result.tokens),
        }
