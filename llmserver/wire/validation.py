"""Body validation for the supported OpenAI subset of chat and text completions and embeddings.

Known fields are checked for type and range; unknown fields pass through to the backend, which
understands more than the gateway does (vLLM's sampling extras, for example).

A request without `max_tokens` is sent without one (the engine's own default: vLLM and SGLang
run to the model's context, less the prompt), unless the key's tier sets a maximum, which is
then sent. The gateway's estimates (fair-share charge, TPM, budget hold) assume
`DEFAULT_MAX_TOKENS` for it, corrected to what was generated when it ends.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from llmserver.wire.errors import invalid, invalid_json, invalid_text, unsupported_media_type
from scheduling.prefix_index import block_hashes
from tenants.endpoints import Endpoint

# Fields the gateway owns: a client must not set the backend's priority itself.
GATEWAY_OWNED = ("priority",)
SERVICE_TIERS = ("auto", "default", "flex", "priority", "scale")
# OpenAI's own bound on `n`; vLLM has none, but each choice is a sequence in the batch.
MAX_CHOICES = 128
ENCODING_FORMATS = ("float", "base64")
# The width of the usage columns `model` and `user` (tenants.models.UsageRecord): a longer value
# could not be billed, so it is refused here rather than clipped silently later.
MAX_NAME_CHARS = 128
# NUL cannot be stored by PostgreSQL; a lone surrogate cannot be encoded as UTF-8 at all.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


@dataclass(slots=True)
class CompletionRequest:
    kind: Endpoint
    model: str
    stream: bool
    include_usage: bool
    # The most tokens one choice may generate: as sent, or (not sent) what estimates assume.
    max_tokens: int
    prompt_chars: int
    # Chained hashes of the rendered prompt's leading blocks (never the text itself): what
    # backend choice and batching match prefixes on.
    prefix_blocks: tuple[int, ...]
    wants_flex: bool
    body: dict[str, Any]
    n: int = 1
    service_tier: str | None = None  # as the client asked; echoed as served
    # The Responses API's state, which the gateway keeps (llmserver/pipeline/responses.py): the
    # response this request continues, and whether its own response is to be kept.
    previous_response_id: str | None = None
    store: bool = False

    @property
    def estimated_prompt_tokens(self) -> int:
        return max(1, self.prompt_chars // 4)

    @property
    def most_output_tokens(self) -> int:
        """What every choice together may generate (the estimates' output)."""
        return self.n * self.max_tokens


@dataclass(frozen=True, slots=True)
class TokenLimits:
    """`default`: assumed for a request that names no maximum and is sent none; `limit`: the
    gateway's bound on any request; `tier`: the key's tier's own maximum, sent when the request
    names none (None: the tier has none)."""

    default: int
    limit: int
    tier: int | None = None


def parse_json(raw: bytes, content_type: str | None) -> dict[str, Any]:
    if content_type is not None:
        media = content_type.split(";", 1)[0].strip().lower()
        if media != "application/json":
            raise unsupported_media_type(media)
    if not raw:
        raise invalid("The request body is empty; send a JSON object.")
    try:
        data = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise invalid_json(str(exc)) from None
    except RecursionError:
        # The C parser recurses per nesting level: thousands of `[` exhaust the stack.
        raise invalid_json("it is nested too deeply") from None
    if not isinstance(data, dict):
        raise invalid("The request body must be a JSON object.")
    return data


def _storable(value: str, name: str) -> None:
    """A name the gateway stores (model, user) must fit its usage column and be text the
    database can hold; refusing it here keeps one bad request from failing its usage row."""
    if len(value) > MAX_NAME_CHARS:
        raise invalid(f"'{name}' must be at most {MAX_NAME_CHARS} characters long.", name)
    if _UNSTORABLE.search(value):
        raise invalid(f"'{name}' must not contain NUL characters or lone surrogates.", name)


def _refuse_lone_surrogates(data: dict[str, Any]) -> None:
    """JSON may escape half a surrogate pair (`"\\ud800"`), which Python decodes to a str that
    cannot be encoded as UTF-8: it would fail later, in the prefix hash, the upstream request or
    the usage row. Refused here, naming the top-level field that holds it."""
    for name, value in data.items():
        try:
            json.dumps({name: value}, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise invalid_text(name.encode("utf-8", "replace").decode("utf-8")) from None
        except RecursionError:
            raise invalid_json("it is nested too deeply") from None


def _number(data: dict[str, Any], name: str, low: float, high: float) -> None:
    value = data.get(name)
    if value is None:
        return
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise invalid(f"'{name}' must be a number.", name)
    if not low <= value <= high:
        raise invalid(f"'{name}' must be between {low:g} and {high:g}; got {value}.", name)


def check_max_tokens(
    data: dict[str, Any],
    limits: TokenLimits,
    names: tuple[str, ...] = ("max_completion_tokens", "max_tokens"),
) -> tuple[str, int | None]:
    """The field the client used (the first of `names` given; the API's own names for the
    answer's maximum) and its value (None: not given), checked against the limits: a tier's
    maximum is named in its refusal."""
    name = next((n for n in names if data.get(n) is not None), names[-1])
    value = data.get(name)
    if value is None:
        return name, None
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(f"'{name}' must be an integer.", name)
    if limits.tier is not None and value > limits.tier:
        raise invalid(
            f"'{name}' must be at most {limits.tier}, the maximum of your key's tier; got {value}.",
            name,
        )
    if not 1 <= value <= limits.limit:
        raise invalid(f"'{name}' must be between 1 and {limits.limit}; got {value}.", name)
    return name, value


def _choices(data: dict[str, Any]) -> int:
    n = data.get("n")
    if n is None:
        return 1
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_CHOICES:
        raise invalid(f"'n' must be an integer between 1 and {MAX_CHOICES}.", "n")
    return n


def _stop(data: dict[str, Any]) -> None:
    stop = data.get("stop")
    if stop is None or isinstance(stop, str):
        return
    if not isinstance(stop, list) or len(stop) > 4 or not all(isinstance(s, str) for s in stop):
        raise invalid("'stop' must be a string or a list of at most 4 strings.", "stop")


def _message_text(messages: Any) -> tuple[str, str]:
    """The messages' text (for the token estimate), and the messages rendered in order with
    their roles (what the prefix blocks are hashed over: earlier turns are a later turn's
    prefix)."""
    if not isinstance(messages, list) or not messages:
        raise invalid("'messages' must be a non-empty list of message objects.", "messages")
    parts: list[str] = []
    rendered: list[str] = []
    for i, message in enumerate(messages):
        first = len(parts)
        if not isinstance(message, dict):
            raise invalid(f"'messages[{i}]' must be an object.", f"messages[{i}]")
        role = message.get("role")
        if role not in {"system", "user", "assistant", "tool", "developer", "function"}:
            raise invalid(
                f"'messages[{i}].role' must be a known role; got {role!r}.", f"messages[{i}].role"
            )
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):
            for part in content:
                if not isinstance(part, dict):
                    raise invalid(
                        f"'messages[{i}].content' parts must be objects.", f"messages[{i}].content"
                    )
                text = part.get("text")
                if isinstance(text, str):
                    parts.append(text)
        elif content is not None or role not in {"assistant", "tool", "function"}:
            raise invalid(
                f"'messages[{i}].content' must be a string or a list of parts.",
                f"messages[{i}].content",
            )
        rendered.append(f"<{role}>" + "\n".join(parts[first:]))
    return "\n".join(parts), "\n".join(rendered)


def _prompt_text(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and all(isinstance(p, str) for p in prompt):
        return "\n".join(prompt)
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(p, int) and not isinstance(p, bool) for p in prompt)
    ):
        return "x" * (4 * len(prompt))
    raise invalid("'prompt' must be a string, a list of strings, or a list of token ids.", "prompt")


def check_model(data: dict[str, Any]) -> str:
    _refuse_lone_surrogates(data)
    model = data.get("model")
    if not isinstance(model, str) or not model.strip():
        raise invalid("'model' is required and must be a non-empty string.", "model")
    _storable(model, "model")
    return model


def check_user(data: dict[str, Any]) -> None:
    user = data.get("user")
    if user is not None and not isinstance(user, str):
        raise invalid("'user' must be a string.", "user")
    if user is not None:
        _storable(user, "user")


def check_service_tier(data: dict[str, Any]) -> str | None:
    tier = data.get("service_tier")
    if tier is not None and tier not in SERVICE_TIERS:
        raise invalid(f"'service_tier' must be one of {', '.join(SERVICE_TIERS)}.", "service_tier")
    return tier if isinstance(tier, str) else None


def validate(kind: str, data: dict[str, Any], limits: TokenLimits) -> CompletionRequest:
    """Check a body for endpoint `kind` (chat, completions, embeddings), from HTTP or the
    WebSocket; returns what the gateway needs."""
    if kind == Endpoint.EMBEDDINGS:
        return _embeddings(data)
    model = check_model(data)
    if kind == Endpoint.CHAT:
        text, rendered = _message_text(data.get("messages"))
    else:
        if "prompt" not in data:
            raise invalid("'prompt' is required.", "prompt")
        prompt = data["prompt"]
        text = rendered = _prompt_text(prompt)
        if isinstance(prompt, list) and isinstance(prompt[0], int):
            # Token ids stand in as "x"s for the size estimate; their prefix is the ids.
            rendered = ",".join(str(token) for token in prompt)
    stream = data.get("stream", False)
    if not isinstance(stream, bool):
        raise invalid("'stream' must be a boolean.", "stream")
    options = data.get("stream_options")
    if options is not None and not isinstance(options, dict):
        raise invalid("'stream_options' must be an object.", "stream_options")
    include_usage = bool(options and options.get("include_usage"))
    if options and not stream:
        raise invalid("'stream_options' is only allowed when 'stream' is true.", "stream_options")
    field, asked = check_max_tokens(data, limits)
    _number(data, "temperature", 0.0, 2.0)
    _number(data, "top_p", 0.0, 1.0)
    _number(data, "presence_penalty", -2.0, 2.0)
    _number(data, "frequency_penalty", -2.0, 2.0)
    n = _choices(data)
    _stop(data)
    check_user(data)
    tier = check_service_tier(data)
    body = {k: v for k, v in data.items() if k not in GATEWAY_OWNED and k != "service_tier"}
    body.pop("max_tokens", None)
    body.pop("max_completion_tokens", None)
    sent = asked if asked is not None else limits.tier
    if sent is not None:
        body[field] = sent
    return CompletionRequest(
        kind=Endpoint(kind),
        model=model,
        stream=stream,
        include_usage=include_usage,
        max_tokens=sent if sent is not None else min(limits.default, limits.limit),
        prompt_chars=len(text),
        prefix_blocks=block_hashes(rendered),
        wants_flex=tier == "flex",
        body=body,
        n=n,
        service_tier=tier,
    )


def _embedding_input(value: Any) -> str:
    """The text of an embeddings `input`, for the estimate and the prefix (token ids stand in
    as 4 characters each); refuses what OpenAI refuses (empty, mixed, nested too deep)."""

    def ids(xs: Any) -> bool:
        return (
            isinstance(xs, list)
            and bool(xs)
            and all(isinstance(t, int) and not isinstance(t, bool) and t >= 0 for t in xs)
        )

    if isinstance(value, str) and value:
        return value
    if isinstance(value, list) and value:
        if all(isinstance(v, str) and v for v in value):
            return "\n".join(value)
        if ids(value):
            return "x" * (4 * len(value))
        if all(ids(v) for v in value):
            return "x" * (4 * sum(len(v) for v in value))
    raise invalid(
        "'input' must be a non-empty string, a list of non-empty strings, a list of token ids, "
        "or a list of lists of token ids.",
        "input",
    )


def _embeddings(data: dict[str, Any]) -> CompletionRequest:
    """POST /v1/embeddings: counted by its input tokens, never streamed, nothing generated."""
    model = check_model(data)
    if "input" not in data:
        raise invalid("'input' is required.", "input")
    text = _embedding_input(data["input"])
    encoding = data.get("encoding_format")
    if encoding is not None and encoding not in ENCODING_FORMATS:
        formats = ", ".join(ENCODING_FORMATS)
        raise invalid(f"'encoding_format' must be one of {formats}.", "encoding_format")
    dimensions = data.get("dimensions")
    if dimensions is not None and (
        isinstance(dimensions, bool) or not isinstance(dimensions, int) or dimensions < 1
    ):
        raise invalid("'dimensions' must be a positive integer.", "dimensions")
    check_user(data)
    body = {k: v for k, v in data.items() if k not in GATEWAY_OWNED}
    return CompletionRequest(
        kind=Endpoint.EMBEDDINGS,
        model=model,
        stream=False,
        include_usage=False,
        max_tokens=0,
        prompt_chars=len(text),
        prefix_blocks=(),
        wants_flex=False,
        body=body,
    )
