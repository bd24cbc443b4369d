"""POST /v1/responses (OpenAI's Responses API) as vLLM 0.32 serves it, the text-only subset.

Read in vLLM 0.32: the route and its SSE framing in
`vllm/entrypoints/openai/responses/api_router.py` (`_convert_stream_to_sse_events`: each event is
`event: <type>` then `data: <json>`, and no `[DONE]` ends the stream); the request and response
models in `responses/protocol.py` (`ResponsesRequest`, its validators, `ResponsesResponse` and
`from_request`); the flow in `responses/serving.py` (`_create_responses`,
`responses_full_generator`, `responses_stream_generator`, `_process_simple_streaming_events`);
the event sequence of a plain text answer in `responses/streaming_events.py`
(`SimpleStreamingEventProcessor`, `emit_simple_content_open/_delta/_done`); the prompt in
`responses/utils.py` (`construct_input_messages`: `instructions` as a system message, then a
string `input` as a user message or the listed messages); usage from `responses/context.py`
(`SimpleContext`).

- Stream: `response.created` and `response.in_progress` (the response with status
  "in_progress", no output, `usage` null); at the first text, `response.output_item.added` (a
  message item, status "in_progress") and `response.content_part.added` (an empty output_text
  part); a `response.output_text.delta` per token; then `response.output_text.done`,
  `response.content_part.done`, `response.output_item.done`, and `response.completed` carrying
  the whole response with `usage`. Every event has a `sequence_number` counting from 0. The
  last event is `response.completed` even when the answer was cut by `max_output_tokens`: its
  response then has status "incomplete" and `incomplete_details: {"reason":
  "max_output_tokens"}` (vLLM sends no `response.incomplete`).
- Usage is only in the final response: `{input_tokens, input_tokens_details: {cached_tokens,
  cache_write_tokens, input_tokens_per_turn: [], cached_tokens_per_turn: []}, output_tokens,
  output_tokens_details: {reasoning_tokens: 0, tool_output_tokens: 0, output_tokens_per_turn: [],
  tool_output_tokens_per_turn: []}, total_tokens}`; `cached_tokens` is the prefix cache's hit,
  `cache_write_tokens` the prompt's full blocks it newly stored. There is no `stream_options`.
- `max_output_tokens` is `max_tokens` under another name, with the chat rules: absent, the rest of
  the context (the response echoes the resolved number); above `max_model_len` a 400 naming
  `max_output_tokens`; a prompt that fills the context is the Responses server's own 400 "The
  engine prompt length N exceeds the max_model_len M. Please reduce prompt." (type
  "invalid_request_error", param "input"). `truncation: "auto"` keeps the prompt's first tokens
  that fit.
- Refused as vLLM refuses them: `prompt` ("prompt template is not supported"), `background`
  with `store: false` ("background can only be used when `store` is true"), `background` at all
  (vLLM stores nothing unless `VLLM_ENABLE_RESPONSES_API_STORE`: "This vLLM engine does not
  support `store=True`..."), `tool_choice: "required"` without tools, and any
  `previous_response_id`: nothing is stored, so it is a 404 "Response with id '...' not found."
  (type "invalid_request_error", param "response_id"), as are GET /v1/responses/{id} and POST
  /v1/responses/{id}/cancel. Tools and reasoning are not modelled: tools are echoed, never called.
- With the store on (`--enable-responses-store`, vLLM's `VLLM_ENABLE_RESPONSES_API_STORE=1`), as
  `responses/serving.py` keeps it: one in-memory store for every caller, never evicted
  (`response_store`, the final response by its id; `msg_store`, the messages its prompt was made
  of), written for a request whose `store` is true (the default); a `previous_response_id`
  found there is continued as `construct_input_messages` in `responses/utils.py` builds it: this
  request's `instructions` as the system message, the earlier messages less their system
  message, the earlier output's text as assistant messages, then this input. Any caller may
  continue any stored id: the engine knows no tenants. GET /v1/responses/{id} returns a stored
  response. `background` stays refused (not modelled).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
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
    tokenize,
    validation_error,
    vllm_error,
)

STORE_DISABLED = (
    "This vLLM engine does not support `store=True` and therefore does not support the "
    "background mode. To enable these features, set the environment variable "
    "`VLLM_ENABLE_RESPONSES_API_STORE=1` when launching the vLLM server."
)


def not_found(response_id: str) -> RequestError:
    """`_make_not_found_error` in `vllm/entrypoints/openai/responses/serving.py`."""
    return RequestError(
        404,
        f"Response with id '{response_id}' not found.",
        "response_id",
        kind="invalid_request_error",
    )


class ResponseStore:
    """vLLM's `response_store` and `msg_store`, when `VLLM_ENABLE_RESPONSES_API_STORE` is set."""

    def __init__(self) -> None:
        self.responses: dict[str, dict[str, Any]] = {}
        self.messages: dict[str, list[Any]] = {}

    def keep(self, response: dict[str, Any], messages: list[Any]) -> None:
        self.responses[response["id"]] = response
        self.messages[response["id"]] = messages


def _earlier(store: ResponseStore, response_id: str) -> list[Any]:
    """What `construct_input_messages` puts before this input: the stored messages less their
    system message, then the stored output's text as assistant messages."""
    messages = [m for m in store.messages[response_id] if m.get("role") != "system"]
    for item in store.responses[response_id].get("output", []):
        for part in item.get("content") or []:
            messages.append({"role": "assistant", "content": part.get("text", "")})
    return messages


def _messages(body: dict[str, Any], earlier: list[Any] | None = None) -> list[Any]:
    """`construct_input_messages`: instructions as a system message, the conversation this
    continues, then the input."""
    messages: list[Any] = []
    instructions = body.get("instructions")
    if instructions:
        messages.append({"role": "system", "content": instructions})
    messages += earlier or []
    source = body["input"]
    if isinstance(source, str):
        messages.append({"role": "user", "content": source})
    else:
        for item in source:
            if not isinstance(item, dict) or "role" not in item:
                continue  # tool calls and their outputs are not modelled
            content = item.get("content")
            if isinstance(content, list):  # input_text / output_text parts
                content = [p for p in content if isinstance(p, dict)]
            messages.append({"role": item["role"], "content": content})
    return messages


def _model_validators(body: dict[str, Any]) -> tuple[bool, Any, list[Any]]:
    """`ResponsesRequest`'s model validators, which raise before the fields are read:
    (background, the tool choice in force, the tools)."""
    store = bool_field(body, "store", True)
    background = bool_field(body, "background", False)
    if background and not store:
        raise vllm_error("background can only be used when `store` is true", "background")
    if body.get("prompt") is not None:
        raise vllm_error("prompt template is not supported", "prompt")
    tools = body.get("tools") or []
    tool_choice = body.get("tool_choice", "auto")
    if not tools:
        if tool_choice in ("auto", "none"):
            tool_choice = "none"
        elif tool_choice == "required":
            raise vllm_error(
                "Tool choice 'required' must be specified with 'tools' parameter.", "tool_choice"
            )
        elif isinstance(tool_choice, dict) and tool_choice.get("type") in ("function", "custom"):
            raise vllm_error(
                "Tool choice 'function' not found in 'tools' parameter.", "tool_choice"
            )
    return background, tool_choice, tools


def _response_object(
    body: dict[str, Any],
    spec: ModelSpec,
    background: bool,
    tool_choice: Any,
    tools: list[Any],
    max_tokens: int,
) -> dict[str, Any]:
    """`ResponsesResponse.from_request` while it runs: no output, no usage yet."""
    temperature = float_field(body, "temperature")
    top_p = float_field(body, "top_p")
    request_id = body.get("request_id")
    return {
        "id": request_id if isinstance(request_id, str) else f"resp_{uuid.uuid4().hex}",
        "created_at": int(time.time()),
        "incomplete_details": None,
        "instructions": body.get("instructions"),
        "metadata": body.get("metadata"),
        "model": spec.name,
        "object": "response",
        "output": [],
        "parallel_tool_calls": bool_field(body, "parallel_tool_calls", True),
        "temperature": 1.0 if temperature is None else temperature,
        "tool_choice": tool_choice,
        "tools": tools,
        "top_p": 1.0 if top_p is None else top_p,
        "background": background,
        "max_output_tokens": max_tokens,
        "max_tool_calls": body.get("max_tool_calls"),
        "previous_response_id": None,
        "prompt": None,
        "reasoning": body.get("reasoning"),
        "service_tier": body.get("service_tier", "auto"),
        "status": "in_progress",
        "text": body.get("text"),
        "top_logprobs": None,
        "truncation": body.get("truncation") or "disabled",
        "usage": None,
        "user": body.get("user"),
        "presence_penalty": float_field(body, "presence_penalty") or 0.0,
        "frequency_penalty": float_field(body, "frequency_penalty") or 0.0,
        "kv_transfer_params": None,
        "ec_transfer_params": None,
        "input_messages": None,
        "output_messages": None,
    }


def parse(
    raw: bytes, spec: ModelSpec, store: ResponseStore | None = None
) -> tuple[SimRequest, ResponsesStream]:
    """`store`: the engine's response store, None when it is off (vLLM's default)."""
    body = json_body(raw)
    background, tool_choice, tools = _model_validators(body)
    # The fields.
    if "input" not in body:
        raise missing("input", body)
    if not isinstance(body["input"], (str, list)):
        msg = "Input should be a valid string or a valid list"
        raise validation_error("input", "union_type", msg, body["input"])
    requested = int_field(body, "max_output_tokens", None)
    temperature = float_field(body, "temperature")
    float_field(body, "top_p")  # checked here, in vLLM's order; echoed by the response
    priority = int_field(body, "priority", 0) or 0
    stream = bool_field(body, "stream", False)
    truncation = body.get("truncation") or "disabled"
    # `_create_responses`, in its order.
    spec.check_model(body)
    if background:
        reason = STORE_DISABLED if store is None else "background is not modelled"
        raise RequestError(400, reason, "background", kind="invalid_request_error")
    if body.get("previous_input_messages") and body.get("previous_response_id"):
        raise RequestError(
            400,
            "Only one of `previous_input_messages` and `previous_response_id` can be set.",
            "previous_response_id",
            kind="invalid_request_error",
        )
    earlier = None
    previous = body.get("previous_response_id")
    if previous is not None:
        if store is None or str(previous) not in store.responses:
            raise not_found(str(previous))
        earlier = _earlier(store, str(previous))
    messages = _messages(body, earlier)
    prompt_tokens = tokenize(chat_prompt(messages)) or ["<s>"]
    if truncation != "disabled":
        keep = spec.max_model_len - (1 if requested else 0)
        prompt_tokens = prompt_tokens[: max(keep, 1)]
    check_context(len(prompt_tokens), requested, "max_output_tokens", spec.max_model_len)
    if len(prompt_tokens) >= spec.max_model_len:
        raise RequestError(
            400,
            f"The engine prompt length {len(prompt_tokens)} exceeds the max_model_len "
            f"{spec.max_model_len}. Please reduce prompt.",
            "input",
            kind="invalid_request_error",
        )
    max_tokens = get_max_tokens(len(prompt_tokens), requested, spec.max_model_len)
    check_sampling(1, temperature, max_tokens)
    response = _response_object(body, spec, background, tool_choice, tools, max_tokens)
    response["previous_response_id"] = previous
    keep = store is not None and bool_field(body, "store", True)
    req = SimRequest(
        chat=True,
        prompt_tokens=prompt_tokens,
        max_tokens=max_tokens,
        priority=priority,
        stream=stream,
        include_usage=True,
        stop_at=spec.stops(
            prompt_tokens, 1, requested is not None, bool_field(body, "ignore_eos", False)
        ),
    )
    on_final = (lambda final: store.keep(final, messages)) if store and keep else None
    return req, ResponsesStream(req, response, spec.block_tokens, on_final)


class ResponsesStream:
    """One request's events and body (the app's `Formatter`)."""

    content_type = b"text/event-stream; charset=utf-8"

    def __init__(
        self,
        req: SimRequest,
        response: dict[str, Any],
        block_tokens: int,
        on_final: Callable[[dict[str, Any]], None] | None = None,
    ) -> None:
        self.req, self.response, self.block_tokens = req, response, block_tokens
        self.on_final = on_final  # the store's, where the engine keeps responses
        self.sequence = 0
        self.item_id = f"msg_{uuid.uuid4().hex}"
        self.text = ""
        self.opened = False

    def _event(self, kind: str, **fields: Any) -> bytes:
        payload = {**fields, "sequence_number": self.sequence, "type": kind}
        self.sequence += 1
        return event(kind, payload)

    def _item(self, status: str, content: list[dict[str, Any]]) -> dict[str, Any]:
        return {
            "id": self.item_id,
            "content": content,
            "role": "assistant",
            "status": status,
            "type": "message",
            "phase": None,
        }

    def _part(self, text: str, logprobs: list[Any] | None) -> dict[str, Any]:
        return {"annotations": [], "text": text, "type": "output_text", "logprobs": logprobs}

    def start(self) -> list[bytes]:
        return [
            self._event("response.created", response=self.response),
            self._event("response.in_progress", response=self.response),
        ]

    def delta(self, index: int, text: str, finish: str | None) -> list[bytes]:
        out: list[bytes] = []
        if not text:  # an empty delta opens nothing and is not sent
            return out
        if not self.opened:
            self.opened = True
            out.append(
                self._event(
                    "response.output_item.added", item=self._item("in_progress", []), output_index=0
                )
            )
            out.append(
                self._event(
                    "response.content_part.added",
                    content_index=0,
                    item_id=self.item_id,
                    output_index=0,
                    part=self._part("", []),
                )
            )
        self.text += text
        out.append(
            self._event(
                "response.output_text.delta",
                content_index=0,
                delta=text,
                item_id=self.item_id,
                logprobs=[],
                output_index=0,
            )
        )
        return out

    def end(self, results: list[ChoiceResult]) -> list[bytes]:
        out = []
        output = []
        if self.opened:
            part = self._part(self.text, None)
            item = self._item("completed", [part] if self.text else [])
            output.append(item)
            out += [
                self._event(
                    "response.output_text.done",
                    content_index=0,
                    item_id=self.item_id,
                    logprobs=[],
                    output_index=0,
                    text=self.text,
                ),
                self._event(
                    "response.content_part.done",
                    content_index=0,
                    item_id=self.item_id,
                    output_index=0,
                    part=part,
                ),
                self._event("response.output_item.done", item=item, output_index=0),
            ]
        final = self._final(results, output)
        return [*out, self._event("response.completed", response=final)]

    def full(self, results: list[ChoiceResult]) -> dict[str, Any]:
        text = results[0].text
        content = [self._part(text, None)] if text else []
        return self._final(results, [self._item("completed", content)])

    def _final(self, results: list[ChoiceResult], output: list[Any]) -> dict[str, Any]:
        result = results[0]
        incomplete = result.finish_reason == "length"
        prompt = len(self.req.prompt_tokens)
        written = (prompt // self.block_tokens) * self.block_tokens if self.block_tokens else 0
        usage = {
            "input_tokens": prompt,
            "input_tokens_details": {
                "cached_tokens": result.cached_tokens,
                "cache_write_tokens": max(0, written - result.cached_tokens),
                "input_tokens_per_turn": [],
                "cached_tokens_per_turn": [],
            },
            "output_tokens": result.tokens,
            "output_tokens_details": {
                "reasoning_tokens": 0,
                "tool_output_tokens": 0,
                "output_tokens_per_turn": [],
                "tool_output_tokens_per_turn": [],
            },
            "total_tokens": prompt + result.tokens,
        }
        final = {
            **self.response,
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "output": output,
            "status": "incomplete" if incomplete else "completed",
            "usage": usage,
        }
        if self.on_final is not None:
            self.on_final(final)
        return final
