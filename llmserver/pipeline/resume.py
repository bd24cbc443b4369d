"""Resuming a preempted stream: what its client already has, and the request that continues it.

A chat stream evicted after its first token is continued, not restarted: the original messages
plus the partial assistant message, with `continue_final_message: true, add_generation_prompt:
false` (vLLM's chat API: `check_generation_prompt` in `vllm/entrypoints/openai/protocol.py`
requires the second to be false; llama.cpp's server the same, `oaicompat_chat_params_parse` in
`tools/server/server-common.cpp`), and `max_tokens` reduced by what was delivered. The client
sees one stream. Only kinds whose server continues a final message and can count the original
prompt are resumed: vLLM (`/tokenize` with `messages`, `vllm/entrypoints/openai/api_server.py`),
SGLang (the same `/tokenize` request and answer, `python/sglang/srt/entrypoints/http_server.py`;
it ignores `add_generation_prompt` and continues a final assistant message,
`python/sglang/srt/entrypoints/openai/serving_chat.py`) and llama.cpp (`/apply-template`, then `/tokenize` of that text with special tokens, as its
completion tokenizes a chat prompt: `tools/server/server-context.cpp`): the kinds whose profile
counts prompts (`tenants.backend_kinds`). On other kinds a job is evicted only before its
first token (TGI's `router/src/lib.rs` has no such option).
"""

from __future__ import annotations

import contextlib
import json
from typing import Any

from llmserver.backends.upstream import BackendError, UpstreamClient
from tenants.backend_kinds import PromptCount


class Preempted(Exception):
    """The relay stopped its upstream for the scheduler, cleanly: nothing half sent, nothing
    lost; the job waits at the head of its queue to be resumed."""


class Delivered:
    """The assistant text a chat stream has delivered so far (content deltas of its one choice).
    A stream that carried anything else (tool calls, a second choice) cannot be continued."""

    __slots__ = ("_parts", "resumable")

    def __init__(self) -> None:
        self._parts: list[str] = []
        self.resumable = True

    def add(self, payload: bytes) -> None:
        """Record an event that carries text (it was sent to the client)."""
        if b'"tool_calls"' in payload:
            self.resumable = False
            return
        try:
            choices = json.loads(payload).get("choices") or []
        except (ValueError, AttributeError):
            self.resumable = False
            return
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                self.resumable = False
                continue
            delta = choice.get("delta")
            content = delta.get("content") if isinstance(delta, dict) else None
            if isinstance(content, str):
                self._parts.append(content)

    @property
    def text(self) -> str:
        return "".join(self._parts)


def continuation_body(body: dict[str, Any], text: str, delivered_tokens: int) -> dict[str, Any]:
    """The upstream request that continues `body` after `text` (`delivered_tokens` tokens)."""
    out = {
        **body,
        "messages": [*body["messages"], {"role": "assistant", "content": text}],
        "continue_final_message": True,
        "add_generation_prompt": False,
    }
    for limit in ("max_tokens", "max_completion_tokens"):
        if isinstance(out.get(limit), int):
            out[limit] = max(1, out[limit] - delivered_tokens)
    return out


async def original_prompt_tokens(
    client: UpstreamClient, body: dict[str, Any], upstream_model: str, request_id: str
) -> int | None:
    """The original request's prompt, counted by the backend as its completion counted it, or
    None where the backend cannot say (the continuation's count, less the delivered tokens, is
    then the estimate)."""
    messages = body["messages"]
    how = client.profile.prompt_count
    if how is PromptCount.NONE:
        return None
    with contextlib.suppress(BackendError):
        if how is PromptCount.APPLY_TEMPLATE:
            _, templated = await client.complete(
                "/apply-template", {"messages": messages}, request_id=request_id
            )
            prompt = templated.get("prompt")
            if not isinstance(prompt, str):
                return None
            count = {"content": prompt, "add_special": True, "parse_special": True}
            _, data = await client.complete("/tokenize", count, request_id=request_id)
            tokens = data.get("tokens")
            return len(tokens) if isinstance(tokens, list) else None
        count = {"model": upstream_model, "messages": messages, "add_generation_prompt": True}
        _, data = await client.complete("/tokenize", count, request_id=request_id)
        return data["count"] if isinstance(data.get("count"), int) else None
    return None
