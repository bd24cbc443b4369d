"""The Responses API's state, owned by the gateway: which response was returned to whom, and
the conversation a `previous_response_id` continues.

An engine that keeps responses (vLLM with `VLLM_ENABLE_RESPONSES_API_STORE`) keeps them for
every caller alike, so behind a shared engine one tenant could continue, and so read, another's.
The gateway therefore sends every Responses request with `store: false` and keeps the state
itself (`tenants.models.StoredResponse`): a `previous_response_id` is looked up as its caller
sees it (`tenants/visibility.py`) before anything is queued, a 404 if it is not theirs, and the
conversation it ends is sent as the input. So chaining works on engines that keep nothing, and
never depends on one that does. A response is kept for `RESPONSES_RETENTION_DAYS`.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from typing import Any

from django.utils import timezone

from llmserver.runtime.db import run_db
from llmserver.runtime.keys import KeyInfo
from llmserver.wire.agent_apis import responses_prompt
from llmserver.wire.errors import previous_response_not_found
from llmserver.wire.validation import CompletionRequest
from scheduling.prefix_index import block_hashes
from tenants.models import StoredResponse

log = logging.getLogger(__name__)


def input_items(value: Any) -> list[Any]:
    """A request's `input` as a list of items (a string is one user message)."""
    return [{"role": "user", "content": value}] if isinstance(value, str) else list(value)


def output_items(response: dict[str, Any]) -> list[dict[str, Any]]:
    """A response's messages as input items of the turn that continues it: their text as
    assistant messages, as vLLM's `construct_input_messages` (`responses/utils.py`) adds a
    stored output (reasoning and tool calls are left out there too)."""
    items = []
    for item in response.get("output") or []:
        if not isinstance(item, dict) or item.get("type") != "message":
            continue
        parts = item.get("content") or []
        text = "".join(str(p.get("text", "")) for p in parts if isinstance(p, dict) and "text" in p)
        items.append({"role": "assistant", "content": text})
    return items


# In worker threads (run_db) ---------------------------------------------------------------


def find_conversation(key: KeyInfo, response_id: str, now: datetime) -> list[Any] | None:
    """The conversation `response_id` ends, if `key` sees that response and it is not expired."""
    rows = StoredResponse.objects.filter(
        pk=response_id, tenant_id=key.tenant_id, expires_at__gt=now
    )
    if not key.sees_tenant:
        rows = rows.filter(user=key.user)
    found: list[Any] | None = rows.values_list("conversation", flat=True).first()
    return found


def keep(key: KeyInfo, response_id: str, model: str, conversation: list[Any], days: int) -> None:
    StoredResponse.objects.create(
        id=response_id,
        tenant_id=key.tenant_id,
        user=key.user,
        api_key_id=key.key_id,
        model=model,
        conversation=conversation,
        expires_at=timezone.now() + timedelta(days=days),
    )


# On the request path ----------------------------------------------------------------------


async def continue_conversation(key: KeyInfo, req: CompletionRequest) -> list[Any]:
    """The conversation `req` makes: with a `previous_response_id`, the earlier one and then its
    own input, which becomes the input sent (and the prompt's estimate and prefix follow).
    Raises the 404 for a previous response this key was not given, or that has expired."""
    own = input_items(req.body["input"])
    if req.previous_response_id is None:
        return own
    earlier = await run_db(find_conversation, key, req.previous_response_id, timezone.now())
    if earlier is None:
        raise previous_response_not_found(req.previous_response_id)
    conversation = [*earlier, *own]
    req.body["input"] = conversation
    text = responses_prompt(req.body)
    req.prompt_chars, req.prefix_blocks = len(text), block_hashes(text)
    return conversation


async def remember(
    key: KeyInfo,
    req: CompletionRequest,
    conversation: list[Any],
    response: dict[str, Any],
    days: int,
) -> None:
    """Keep a response the client was given, for the turn that may continue it. Served is
    served: a response that cannot be kept is logged, and continuing it will be a 404."""
    response_id = response.get("id")
    if not isinstance(response_id, str):
        return
    whole = [*conversation, *output_items(response)]
    try:
        await run_db(keep, key, response_id, req.model, whole, days)
    except Exception:
        log.exception("response %s could not be kept; continuing it will be a 404", response_id)
