"""The OpenAI-compatible wire format as vLLM speaks it: request parsing, token estimates,
response bodies, stream chunks and errors (OpenAI's shape with an integer `code`).

Chat and text completions follow vLLM 0.32 (`vllm/entrypoints/openai/chat_completion/` and
`completion/`, `protocol.py` and `serving.py` in each):

- Output length. Without `max_tokens` a chat request may use the rest of the context,
  `max_model_len - prompt_tokens`, and a text completion gets OpenAI's default of 16
  (`CompletionRequest.max_tokens = 16`, `normalize_null_max_tokens`); a given value is clamped
  to the rest of the context, silently (`get_max_tokens` in
  `vllm/entrypoints/serve/utils/api_utils.py`). Refused with 400: a `max_tokens` above
  `max_model_len` ("max_tokens=N cannot be greater than max_model_len=M...", `TokenizeParams` in
  `vllm/renderers/params.py`), a prompt longer than `max_model_len` ("This model's maximum
  context length is M tokens. However, your prompt contains N input tokens...",
  `TokenizeParams._token_len_check`), and a resulting `max_tokens` below 1 ("max_tokens must be
  at least 1, got 0.", `SamplingParams._verify_args` in `vllm/sampling_params.py`, which is what
  a prompt of exactly `max_model_len` tokens gets). A prompt plus `max_tokens` over the context
  is not refused in 0.32: `max_tokens` is cut to fit.
- The natural end. A real model stops on its end-of-sequence token; the simulator's model stops
  after a deterministic 20 to 200 tokens per prompt and choice (`natural_length`), with finish
  reason "stop". By default (`natural_stop="when-unlimited"`) it does so only where the client
  set no limit, so a client's `max_tokens` is the load it asks for (what the gateway's tests and
  benchmarks rely on: a request given `max_tokens` runs to it, finish reason "length");
  `natural_stop="always"` ends every answer there, as a real model would, unless the request
  sends vLLM's `ignore_eos`. A continued final message (`continue_final_message`) ends where the
  uninterrupted answer would have.
- `n`: n choices, each its own engine sequence (vLLM's parent request with n children,
  `vllm/v1/engine/parallel_sampling.py`), indexed 0..n-1 in the body and in every stream chunk;
  a chat stream opens with one role chunk per choice, sent with the first output (so a request
  queued in the engine has its headers and nothing more); usage counts the prompt once and the
  completion tokens of all choices (`chat_completion_stream_generator`,
  `request_output_to_completion_response`). Refused with 400 as `SamplingParams` refuses: `n`
  below 1 ("n must be at least 1, got 0."), above `VLLM_MAX_N_SEQUENCES` (16384), and `n > 1`
  with `temperature` 0 ("n must be 1 when using greedy sampling, got 2."). `use_beam_search`
  (beam width n) is served as n sampled choices, and refused on a streamed text completion as
  vLLM does ("Streaming is not currently supported with beam search").
- Errors vLLM's handler raises (`create_error_response` in
  `vllm/entrypoints/serve/exception_handling/error_response.py`) carry `str()` of a
  `VLLMValidationError`, which appends "(parameter=..., value=...)" (`vllm/exceptions.py`);
  malformed fields are pydantic's, answered by `validation_exception_handler`
  (`handlers/validation.py`) with type "Bad Request" and a `body.<field>` param (`validation_error`
  here; the message's wording is pydantic's, approximated).
"""

from __future__ import annotations

import itertools
import json
import math
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

# `VLLM_MAX_N_SEQUENCES`'s default (`vllm/envs.py`).
MAX_N_SEQUENCES = 16384
# vLLM's defaults where the model's generation config sets none (`_DEFAULT_SAMPLING_PARAMS`).
DEFAULT_TEMPERATURE = 1.0
_SAMPLING_EPS = 1e-5
_MAX_TEMP = 1e-2
NATURAL_STOPS = ("when-unlimited", "always")
RUNNERS = ("both", "generate", "pooling")


def next_id(prefix: str) -> str:
    """A response id in the simulator's numbering ("chatcmpl-sim0000002a")."""
    return f"{prefix}-sim{next(_ids):08x}"


class RequestError(Exception):
    """A request the simulator refuses, rendered as vLLM's error body. `kind` is the body's
    `type`: by default the one `create_error_response` names for the status; "Bad Request" for
    pydantic's validation errors."""

    def __init__(
        self, status: int, message: str, param: str | None = None, kind: str | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param = status, message, param
        self.kind = kind or {400: "BadRequestError", 404: "NotFoundError"}.get(
            status, "InternalServerError"
        )

    @property
    def is_validation(self) -> bool:
        """Raised while FastAPI validates the body, before any endpoint code runs."""
        return self.kind == "Bad Request"

    def body(self) -> dict[str, Any]:
        return {
            "error": {
                "message": self.message,
                "type": self.kind,
                "param": self.param,
                "code": self.status,
            }
        }


def vllm_error(message: str, parameter: str | None = None, value: Any = None) -> RequestError:
    """A `VLLMValidationError` as vLLM's handler answers it: 400, its `str()` as the message."""
    extras = []
    if parameter is not None:
        extras.append(f"parameter={parameter}")
    if value is not None:
        extras.append(f"value={value}")
    text = f"{message} ({', '.join(extras)})" if extras else message
    return RequestError(400, text, parameter)


def _summarize_input(value: Any) -> str:
    """`_summarize_error_input` in vLLM's validation handler."""
    if isinstance(value, str):
        return value[:200] + "...[truncated]" if len(value) > 200 else value
    if isinstance(value, (list, tuple, set, frozenset, dict)):
        return f"<{type(value).__name__} of {len(value)} items>"
    return str(value)


def validation_error(
    field: str, err_type: str, msg: str, value: Any, ctx: Exception | None = None
) -> RequestError:
    """pydantic's error on the body's `field`, as vLLM's `validation_exception_handler` renders
    a one-error `RequestValidationError`: 400, type "Bad Request", param `body.<field>`."""
    loc = f"body.{field}" if field else "body"
    err: dict[str, Any] = {
        "type": err_type,
        "loc": loc,
        "msg": msg,
        "input": _summarize_input(value),
    }
    if ctx is not None:
        err["ctx"] = {"error": ctx}
    return RequestError(400, f"1 validation error:\n  {err!r}", loc, kind="Bad Request")


def missing(field: str, body: dict[str, Any]) -> RequestError:
    return validation_error(field, "missing", "Field required", body)


def value_error(field: str, message: str, value: Any) -> RequestError:
    """A `ValueError` raised by a pydantic validator (`field` "" for a model validator)."""
    return validation_error(
        field, "value_error", f"Value error, {message}", value, ValueError(message)
    )


def int_field(body: dict[str, Any], field: str, default: int | None) -> int | None:
    """An integer field as pydantic reads it in lax mode: booleans, integral floats and numeric
    strings are integers; anything else is a validation error. null gives `default`."""
    value = body.get(field)
    if value is None:
        return default
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if value.is_integer():
            return int(value)
        msg = "Input should be a valid integer, got a number with a fractional part"
        raise validation_error(field, "int_from_float", msg, value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            msg = "Input should be a valid integer, unable to parse string as an integer"
            raise validation_error(field, "int_parsing", msg, value) from None
    raise validation_error(field, "int_type", "Input should be a valid integer", value)


def float_field(body: dict[str, Any], field: str) -> float | None:
    value = body.get(field)
    if value is None:
        return None
    if isinstance(value, (bool, int, float)):
        return float(value)
    if isinstance(value, str):
        try:
            return float(value.strip())
        except ValueError:
            msg = "Input should be a valid number, unable to parse string as a number"
            raise validation_error(field, "float_parsing", msg, value) from None
    raise validation_error(field, "float_type", "Input should be a valid number", value)


def bool_field(body: dict[str, Any], field: str, default: bool) -> bool:
    value = body.get(field)
    if value is None:
        return default
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.lower() in ("true", "false", "1", "0", "yes", "no"):
        return value.lower() in ("true", "1", "yes")
    raise validation_error(field, "bool_parsing", "Input should be a valid boolean", value)


def tokenize(text: str) -> list[str]:
    """A stand-in tokenizer: words and punctuation, close enough to ~4 characters a token."""
    return _TOKEN.findall(text)


def token_id(token: str) -> int:
    """The stand-in tokenizer's id for a token, as /tokenize and the KV cache events give it."""
    return zlib.crc32(token.encode()) % 32_000


def token_text(index: int, choice: int = 0) -> str:
    """The deterministic filler for output token `index` (1-based) of choice `choice`: choice 0
    reads FILLER from its start, each other choice from its own offset, so the n choices of one
    request differ as sampled answers do."""
    return ("" if index == 1 else " ") + FILLER[(index - 1 + 7 * choice) % len(FILLER)]


def natural_length(prompt_tokens: list[str], choice: int = 0) -> int:
    """How many tokens the simulator's model says before its end-of-sequence token: 20 to 200,
    fixed by the prompt and the choice."""
    key = "\x1f".join(prompt_tokens) + f"\x1e{choice}"
    return 20 + zlib.crc32(key.encode()) % 181


@dataclass(frozen=True, slots=True)
class ModelSpec:
    """What the request parsers need to know of the served model."""

    name: str = "demo-llama"
    fmt: str = "vllm"
    max_model_len: int = 131_072
    natural_stop: str = "when-unlimited"
    # The prefix cache's block size; 0 when the cache is off.
    block_tokens: int = 16

    def check_model(self, body: dict[str, Any]) -> None:
        """vLLM's `_check_model` (`vllm/entrypoints/serve/engine/serving.py`): an absent or
        empty model is the served one; another name is a 404 naming the served alias."""
        model = body.get("model")
        if model and model != self.name:
            raise RequestError(
                404,
                f"The model `{model}` does not exist. Valid aliases: {self.name}.",
                "model",
            )

    def stops(
        self, key_tokens: list[str], n: int, limited: bool, ignore_eos: bool, offset: int = 0
    ) -> tuple[int | None, ...]:
        """Each choice's natural end, counted from `offset` tokens already said (None: none)."""
        if ignore_eos or (limited and self.natural_stop != "always"):
            return (None,) * n
        return tuple(max(1, natural_length(key_tokens, c) - offset) for c in range(n))


def check_context(prompt_len: int, requested: int | None, param: str, model_len: int) -> None:
    """The renderer's checks (`TokenizeParams.__post_init__` and `_token_len_check` in
    `vllm/renderers/params.py`): the requested output alone, then the prompt alone, must fit the
    context. The tokenizer reads at most `max_model_len + 1` tokens, hence "at least"."""
    if requested is not None and requested > model_len:
        raise vllm_error(
            f"{param}={requested} cannot be greater than max_model_len={model_len}. "
            "Please request fewer output tokens.",
            param,
            requested,
        )
    if prompt_len > model_len:
        count = min(prompt_len, model_len + 1)
        qualifier = "at least " if count == model_len + 1 else ""
        raise vllm_error(
            f"This model's maximum context length is {model_len} tokens. However, your prompt "
            f"contains {qualifier}{count} input tokens, which exceeds this limit even without "
            "any output tokens. Please reduce the length of the input prompt.",
            "input_tokens",
            count,
        )


def get_max_tokens(prompt_len: int, requested: int | None, model_len: int) -> int:
    """`get_max_tokens` (`vllm/entrypoints/serve/utils/api_utils.py`): the rest of the context,
    or the request's value if smaller (no server-side default or override here)."""
    rest = model_len - prompt_len
    return rest if requested is None else min(rest, requested)


def check_sampling(n: int, temperature: float | None, max_tokens: int) -> None:
    """`SamplingParams.__post_init__` and `_verify_args` (`vllm/sampling_params.py`), in their
    order, for the fields the simulator reads."""
    if n < 1:
        raise vllm_error(f"n must be at least 1, got {n}.")
    if n > MAX_N_SEQUENCES:
        raise vllm_error(
            f"n must be at most {MAX_N_SEQUENCES}, got {n}. To increase this limit, set the "
            "VLLM_MAX_N_SEQUENCES environment variable."
        )
    t = DEFAULT_TEMPERATURE if temperature is None else temperature
    if 0 < t < _MAX_TEMP:  # raised to 0.01, so only 0 is greedy
        t = _MAX_TEMP
    if not math.isfinite(t):
        raise vllm_error(f"temperature must be a finite number, got {t}.", "temperature", t)
    if t < 0.0:
        raise vllm_error(f"temperature must be non-negative, got {t}.", "temperature", t)
    if t > 2.0:
        raise vllm_error(f"temperature must be in [0, 2], got {t}.", "temperature", t)
    if max_tokens < 1:
        raise vllm_error(
            f"max_tokens must be at least 1, got {max_tokens}.", "max_tokens", max_tokens
        )
    if t < _SAMPLING_EPS and n > 1:
        raise vllm_error(f"n must be 1 when using greedy sampling, got {n}.")


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
    n: int = 1
    # Each choice's natural end (None: it runs to `max_tokens`).
    stop_at: tuple[int | None, ...] = (None,)


@dataclass(frozen=True, slots=True)
class ChoiceResult:
    """One finished choice, as the response builders read it."""

    index: int
    text: str
    tokens: int
    finish_reason: str
    cached_tokens: int = 0


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


def json_body(raw: bytes) -> dict[str, Any]:
    """The request's JSON object, or the 400 vLLM answers a body that is not one with."""
    try:
        body = json.loads(raw or b"{}")
    except (ValueError, UnicodeDecodeError) as exc:
        raise RequestError(400, f"Invalid JSON body: {exc}", kind="Bad Request") from exc
    if not isinstance(body, dict):
        raise RequestError(400, "The request body must be a JSON object.", kind="Bad Request")
    return body


def _request_body(raw: bytes, model: str) -> dict[str, Any]:
    """The JSON object of a request for `model`, or the RequestError vLLM answers with."""
    body = json_body(raw)
    ModelSpec(name=model).check_model(body)
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


def parse_request(raw: bytes, chat: bool, spec: ModelSpec | None = None) -> SimRequest:
    """A chat (`chat`) or text completion request, checked as vLLM 0.32 checks it: the body's
    fields as pydantic reads them, the model, the context, then the sampling parameters."""
    spec = spec or ModelSpec()
    body = json_body(raw)
    if chat and body.get("messages") is None:
        raise missing("messages", body)
    n = int_field(body, "n", 1)
    if n is None:  # `CompletionRequest.n: int = 1` is not nullable
        raise validation_error("n", "int_type", "Input should be a valid integer", None)
    param = "max_tokens"
    if chat and body.get("max_completion_tokens") is not None:
        param = "max_completion_tokens"
    requested = int_field(body, param, None)
    temperature = float_field(body, "temperature")
    priority = int_field(body, "priority", 0) or 0
    stream = bool_field(body, "stream", False)
    ignore_eos = bool_field(body, "ignore_eos", False)
    if not chat and stream and bool_field(body, "use_beam_search", False):
        raise RequestError(400, "Streaming is not currently supported with beam search")
    spec.check_model(body)
    output_offset = 0
    if chat:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise RequestError(400, "`messages` must be a non-empty list.", "messages")
        output_offset = _continued_tokens(body, messages, spec.fmt)
        text = chat_prompt(messages, _generation_prompt(body, spec.fmt))
    else:
        prompt = body.get("prompt")
        if isinstance(prompt, list):
            prompt = " ".join(str(p) for p in prompt)
        if not isinstance(prompt, str):
            raise RequestError(400, "`prompt` must be a string.", "prompt")
        text = prompt
    limit = requested
    if limit is None and not chat:
        limit = 16  # OpenAI's default, vLLM's `CompletionRequest.max_tokens`
    prompt_tokens = tokenize(text) or ["<s>"]
    check_context(len(prompt_tokens), limit, param, spec.max_model_len)
    max_tokens = get_max_tokens(len(prompt_tokens), limit, spec.max_model_len)
    check_sampling(n, temperature, max_tokens)
    key = prompt_tokens
    if body.get("continue_final_message") and chat:
        # The answer being continued was asked by the messages before it.
        key = tokenize(chat_prompt(body["messages"][:-1])) or ["<s>"]
    options = body.get("stream_options") or {}
    return SimRequest(
        chat=chat,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        priority=priority,
        stream=stream,
        include_usage=bool(isinstance(options, dict) and options.get("include_usage")),
        output_offset=output_offset,
        n=n,
        stop_at=spec.stops(key, n, requested is not None, ignore_eos, output_offset),
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


def engine_priority(fmt: str, policy: str, priority: int, refuse: bool = False) -> int:
    """The priority the engine queues by (lower first), or a RequestError where the server
    refuses the request. Each kind as its server does:

    - vLLM: lower values go first under `--scheduling-policy priority`
      (`vllm/v1/core/sched/request_queue.py`, `PriorityRequestQueue`). Under the default `fcfs`
      policy the V1 engine, the only one since 0.11, takes any priority and ignores it: the
      waiting queue is a FIFO deque (`FCFSRequestQueue` in the same file) and the input processor
      (`vllm/v1/engine/input_processor.py`) checks nothing; the real vLLM 0.32 answers 200 and
      runs the requests in arrival order (`tests/vllm/test_vllm_sdk.py`,
      `test_the_engine_ignores_a_priority_under_fcfs`). With `refuse` (the simulator's
      `--refuse-priority-under-fcfs`) it refuses a non-zero priority with 400 "Got priority N but
      Priority scheduling is not enabled.", as the V0 engine did: vLLM's default before 0.8.0,
      chosen with `VLLM_USE_V1=0` up to 0.10 (`vllm/engine/llm_engine.py` `add_request` and
      `vllm/engine/async_llm_engine.py` `add_request_async` of those versions).
    - SGLang: ignored unless `--enable-priority-scheduling`; when on, higher values go first by
      default (`python/sglang/srt/server_args.py`, `--schedule-low-priority-values-first` flips
      it; `python/sglang/srt/managers/scheduler.py` `_set_or_validate_priority`).
    - TGI: there is no priority; unknown fields are ignored (`router/src/lib.rs`).
    """
    if fmt == "vllm":
        if policy == "priority":
            return priority
        if priority != 0 and refuse:
            raise RequestError(
                400, f"Got priority {priority} but Priority scheduling is not enabled."
            )
        return 0
    if fmt == "sglang" and policy == "priority":
        return -priority
    return 0


class ResponseBuilder:
    """Builds one request's bodies and chunks, in chat or text-completion shape."""

    content_type = b"text/event-stream; charset=utf-8"

    def __init__(self, req: SimRequest, model: str) -> None:
        self.req, self.model = req, model
        self.id = next_id("chatcmpl" if req.chat else "cmpl")
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

    def _choice(
        self, text: str, finish: str | None, first: bool = False, index: int = 0
    ) -> dict[str, Any]:
        if not self.req.chat:
            return {"index": index, "text": text, "logprobs": None, "finish_reason": finish}
        delta: dict[str, Any] = {"role": "assistant", "content": text} if first else {}
        if text and not first:
            delta = {"content": text}
        return {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}

    def usage(self, completion_tokens: int) -> dict[str, int]:
        p = len(self.req.prompt_tokens)
        return {
            "prompt_tokens": p,
            "completion_tokens": completion_tokens,
            "total_tokens": p + completion_tokens,
        }

    def chunk(
        self, text: str, finish: str | None = None, first: bool = False, index: int = 0
    ) -> bytes:
        return sse(self._envelope([self._choice(text, finish, first, index)], chunk=True))

    def usage_chunk(self, completion_tokens: int) -> bytes:
        body = self._envelope([], chunk=True)
        body["usage"] = self.usage(completion_tokens)
        return sse(body)

    # The stream and body interface the app drives (see simulator/app.py).
    def start(self) -> list[bytes]:
        """A chat stream opens with a role chunk per choice; a text completion's does not."""
        if not self.req.chat:
            return []
        return [self.chunk("", first=True, index=i) for i in range(self.req.n)]

    def delta(self, index: int, text: str, finish: str | None) -> list[bytes]:
        return [self.chunk(text, finish, index=index)]

    def end(self, results: list[ChoiceResult]) -> list[bytes]:
        out = []
        if self.req.include_usage:
            out.append(self.usage_chunk(sum(r.tokens for r in results)))
        return [*out, DONE]

    def full(self, results: list[ChoiceResult]) -> dict[str, Any]:
        choices = []
        for r in results:
            if self.req.chat:
                choices.append(
                    {
                        "index": r.index,
                        "message": {"role": "assistant", "content": r.text},
                        "logprobs": None,
                        "finish_reason": r.finish_reason,
                    }
                )
            else:
                choices.append(
                    {
                        "index": r.index,
                        "text": r.text,
                        "logprobs": None,
                        "finish_reason": r.finish_reason,
                    }
                )
        body = self._envelope(choices, chunk=False)
        body["usage"] = self.usage(sum(r.tokens for r in results))
        return body


def sse(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def event(name: str, payload: dict[str, Any]) -> bytes:
    """One server-sent event with an `event:` line, as vLLM's Responses and Anthropic streams
    write them (`f"event: {type}\\ndata: {json}\\n\\n"`)."""
    data = json.dumps(payload, separators=(",", ":")).encode()
    return b"event: " + name.encode() + b"\ndata: " + data + b"\n\n"


DONE = b"data: [DONE]\n\n"
