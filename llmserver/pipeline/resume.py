"""Resuming a preempted stream: what its client already has, and the request that continues it.

A chat stream evicted after its first token is continued, not restarted: the original messages
plus the partial assistant message, with `continue_final_message: true, add_generation_prompt:
false` (vLLM's chat API: `check_generation_prompt` in `vllm/entrypoints/openai/protocol.py`
requires the second to be false), and `max_tokens` reduced by what was delivered. The client sees
one stream. Only kinds whose server continues a final message and counts a prompt on `/tokenize`
(vLLM's `/tokenize` in `vllm/entrypoints/openai/api_server.py`) are resumed; on others a job is
evicted only before its first token (TGI's `router/src/lib.rs` has no such option).
"""

from __future__ import annotations

import json
from typing import Any

RESUMABLE_KINDS = frozenset({"vllm"})


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


def prompt_count_request(body: dict[str, Any], upstream_model: str) -> dict[str, Any]:
    """A `/tokenize` body that counts the original request's prompt as its completion did."""
    return {"model": upstream_model, "messages": body["messages"], "add_generation_prompt": True}
