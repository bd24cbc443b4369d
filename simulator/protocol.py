"""The OpenAI-compatible wire format as vLLM speaks it: request parsing, token estimates,
response bodies, stream chunks and errors (OpenAI's shape with an integer `code`)."""

from __future__ import annotations

import itertools
import json
import re
import time
import zlib
from dataclasses import dataclass
from typing import Any

FILLER = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "patient",
    "queues",
    "keep",
    "every",
    "user",
    "served",
    "in",
    "fair",
    "turns",
    "and",
    "batches",
    "stay",
    "full",
]
_TOKEN = re.compile(r"\w+|[^\w\s]")
_ids = itertools.count(1)


class RequestError(Exception):
    """A request the simulator refuses, rendered as vLLM's error body."""

    def __init__(self, status: int, message: str, param: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param

    def body(self) -> dict[str, Any]:
        kind = {400: "BadRequestError", 404: "NotFoundError"}.get(
            self.status, "InternalServerError"
        )
        return {
            "error": {
                "message": self.message,
                "type": kind,
                "param": self.param,
                "code": self.status,
            }
        }


def tokenize(text: str) -> list[str]:
    """A stand-in tokenizer: words and punctuation, close enough to ~4 characters a token."""
    return _TOKEN.findall(text)


def token_id(token: str) -> int:
    """The stand-in tokenizer's id for a token, as /tokenize and the KV cache events give it."""
    return zlib.crc32(token.encode()) % 32_000


def token_text(index: int) -> str:
    """The deterministic filler for output token `index` (1-based)."""
    return ("" if index == 1 else " ") + FILLER[(index - 1) % len(FILLER)]


@dataclass(frozen=True, slots=True)
class SimRequest:
    chat: bool
    prompt_tokens: list[str]
    max_tokens: int
    priority: int
    stream: bool
    include_usage: bool
    # Output tokens already in the final assistant message being continued: generation resumes
    # at this index, so a continued answer reads as the same answer uninterrupted.
    output_offset: int = 0


def _content_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return " ".join(p.get("text", "") for p in content if isinstance(p, dict))
    return ""


def chat_prompt(messages: list[Any], add_generation_prompt: bool = True) -> str:
    """The simulator's chat template: one `role: content` line per message, then the
    generation prompt (an `assistant:` line the answer follows), as a Hugging Face chat template
    renders `add_generation_prompt` (transformers' `apply_chat_template`, which vLLM and SGLang
    call; true by default in their chat and /tokenize requests). Without it the final message
    is left open, as `continue_final_message` renders it: so a continuation's prompt is the
    original prompt plus the text it continues, as with real templates."""
    lines = [
        f"{m.get('role', 'user')}: {_content_text(m.get('content'))}"
        for m in messages
        if isinstance(m, dict)
    ]
    if add_generation_prompt:
        lines.append("assistant:")
    return "\n".join(lines)


def _request_body(raw: bytes, model: str) -> dict[str, Any]:
    """The JSON object of a request for `model`, or the RequestError vLLM answers with."""
    try:
        body = json.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(400, f"Invalid JSON body: {exc}") from exc
    if not isinstance(body, dict):
        raise RequestError(400, "The request body must be a JSON object.")
    if body.get("model", model) != model:
        raise RequestError(404, f"The model `{body.get('model')}` does not exist.", "model")
    return body


def parse_tokenize(raw: bytes, model: str, fmt: str = "vllm") -> list[str]:
    """vLLM's `/tokenize` (`vllm/entrypoints/openai/api_server.py`, `TokenizeRequest` in
    `vllm/entrypoints/openai/protocol.py`), and SGLang's, which answers the same request in the
    same shape (`/tokenize` in `python/sglang/srt/entrypoints/http_server.py`, `TokenizeRequest`
    in `python/sglang/srt/entrypoints/openai/protocol.py`): a `prompt`, or `messages` rendered
    with the chat template, as a chat completion would count them."""
    body = _request_body(raw, model)
    messages = body.get("messages")
    if isinstance(messages, list) and messages:
        _continued_tokens(body, messages, fmt)  # the same refusals as the chat endpoint
        return tokenize(chat_prompt(messages, _generation_prompt(body, fmt)))
    prompt = body.get("prompt")
    if not isinstance(prompt, str):
        raise RequestError(400, "`prompt` or `messages` is required.", "prompt")
    return tokenize(prompt)


def _generation_prompt(body: dict[str, Any], fmt: str) -> bool:
    """Whether the template adds the generation prompt: vLLM's `add_generation_prompt`
    (default true; false is required with `continue_final_message`); SGLang has no such field
    and adds it except where it continues a final assistant message (`serving_chat.py`)."""
    if body.get("continue_final_message"):
        return False
    if fmt == "sglang":
        return True
    return bool(body.get("add_generation_prompt", True))


def parse_request(
    raw: bytes, chat: bool, model: str, default_max_tokens: int, fmt: str = "vllm"
) -> SimRequest:
    body = _request_body(raw, model)
    output_offset = 0
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError(400, "`messages` must be a non-empty list.", "messages")
        output_offset = _continued_tokens(body, messages, fmt)
        text = chat_prompt(messages, _generation_prompt(body, fmt))
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list):
            prompt = " ".join(str(p) for p in prompt)
        if not isinstance(prompt, str):
            raise RequestError(400, "`prompt` must be a string.", "prompt")
        text = prompt
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is None:
        max_tokens = default_max_tokens
    if isinstance(max_tokens, bool) or not isinstance(max_tokens, int) or max_tokens < 1:
        raise RequestError(400, "`max_tokens` must be a positive integer.", "max_tokens")
    priority = body.get("priority", 0)
    if isinstance(priority, bool) or not isinstance(priority, int):
        raise RequestError(400, "`priority` must be an integer.", "priority")
    options = body.get("stream_options") or {}
    return SimRequest(
        chat=chat,
        prompt_tokens=tokenize(text) or ["<s>"],
        max_tokens=max_tokens,
        priority=priority,
        stream=bool(body.get("stream", False)),
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
        output_offset=output_offset,
    )


def _continued_tokens(body: dict[str, Any], messages: list[Any], fmt: str) -> int:
    """How many output tokens the final message already holds, where the request asks to
    continue it; 0 otherwise. Each kind as its server does:

    - vLLM: `continue_final_message` and `add_generation_prompt` (which defaults to true for
      chat) are exclusive, a 400 (`check_generation_prompt` in
      `vllm/entrypoints/openai/protocol.py`). The final message is continued whatever its role:
      transformers' `apply_chat_template` refuses only a final message whose text the template
      does not render ("continue_final_message is set but the final message does not appear in
      the chat"), and this template renders every message's text; the real vLLM 0.32 continues a
      final user message with a 200 (`tests/vllm/test_vllm_sdk.py`).
    - SGLang: its `ChatCompletionRequest` has no `add_generation_prompt` (unknown fields are
      ignored: `python/sglang/srt/entrypoints/openai/protocol.py`); with
      `continue_final_message` and a final assistant message, `serving_chat.py` renders the
      other messages with the generation prompt and appends the assistant text to continue it;
      a final message that is not the assistant's is rendered as usual, no error.
    """
    if not body.get("continue_final_message"):
        return 0
    last = messages[-1]
    is_assistant = isinstance(last, dict) and last.get("role") == "assistant"
    if fmt == "sglang":
        return len(tokenize(_content_text(last.get("content")))) if is_assistant else 0
    if body.get("add_generation_prompt", True):
        raise RequestError(
            400, "Cannot set both `continue_final_message` and `add_generation_prompt` to True."
        )
    return len(tokenize(_content_text(last.get("content")) if isinstance(last, dict) else ""))


def engine_priority(fmt: str, policy: str, priority: int) -> int:
    """The priority the engine queues by (lower first), or a RequestError where the server
    refuses the request. Each kind as its server does:

    - vLLM: a non-zero priority under the default `fcfs` policy is refused with 400 "Got
      priority N but Priority scheduling is not enabled." (`vllm/engine/llm_engine.py`
      `LLMEngine.add_request` and `vllm/engine/async_llm_engine.py` `add_request_async`; mapped
      to 400 by `create_error_response` in `vllm/entrypoints/openai/serving_engine.py`). The V1
      engine (`vllm/v1/engine/input_processor.py`) ignores it silently instead, as the real
      vLLM 0.32 does in `tests/vllm/test_vllm_sdk.py`; the simulator keeps the refusal, the
      stricter witness, so a gateway that sends it unasked is caught.
      Lower values go first (`vllm/v1/core/sched/scheduler.py`).
    - SGLang: ignored unless `--enable-priority-scheduling`; when on, higher values go first by
      default (`python/sglang/srt/server_args.py`, `--schedule-low-priority-values-first` flips
      it; `python/sglang/srt/managers/scheduler.py` `_set_or_validate_priority`).
    - TGI: there is no priority; unknown fields are ignored (`router/src/lib.rs`).
    """
    if fmt == "vllm":
        if priority != 0 and policy != "priority":
            raise RequestError(
                400, f"Got priority {priority} but Priority scheduling is not enabled."
            )
        return priority
    if fmt == "sglang" and policy == "priority":
        return -priority
    return 0


class ResponseBuilder:
    """Builds one request's bodies and chunks, in chat or text-completion shape."""

    def __init__(self, req: SimRequest, model: str) -> None:
        self.req, self.model = req, model
        prefix = "chatcmpl" if req.chat else "cmpl"
        self.id = f"{prefix}-sim{next(_ids):08x}"
        self.created = int(time.time())

    def _envelope(self, choices: list[dict[str, Any]], chunk: bool) -> dict[str, Any]:
        obj = ("chat.completion" if self.req.chat else "text_completion") + (
            ".chunk" if chunk and self.req.chat else ""
        )
        return {
            "id": self.id,
            "object": obj,
            "created": self.created,
            "model": self.model,
            "choices": choices,
        }

    def _choice(self, text: str, finish: str | None, first: bool = False) -> dict[str, Any]:
        if not self.req.chat:
            return {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        delta: dict[str, Any] = {"role": "assistant", "content": text} if first else {}
        if text and not first:
            delta = {"content": text}
        return {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}

    def usage(self, completion_tokens: int) -> dict[str, int]:
        p = len(self.req.prompt_tokens)
        return {
            "prompt_tokens": p,
            "completion_tokens": completion_tokens,
            "total_tokens": p + completion_tokens,
        }

    def chunk(self, text: str, finish: str | None = None, first: bool = False) -> bytes:
        return sse(self._envelope([self._choice(text, finish, first)], chunk=True))

    def usage_chunk(self, completion_tokens: int) -> bytes:
        body = self._envelope([], chunk=True)
        body["usage"] = self.usage(completion_tokens)
        return sse(body)

    def full(self, text: str, finish: str, completion_tokens: int) -> dict[str, Any]:
        if self.req.chat:
            choice: dict[str, Any] = {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "logprobs": None,
                "finish_reason": finish,
            }
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
        body = self._envelope([choice], chunk=False)
        body["usage"] = self.usage(completion_tokens)
        return body


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


DONE = b"data: [DONE]\n\n"
