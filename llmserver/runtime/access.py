"""One structured access-log line per completion, as JSON on the `llmserver.access` logger.

Who (tenant, user, key id: never the key), what (model, band, tier), how it went (status,
error type, tokens) and how long (queue wait, time to first token, total). Never the prompt or
the completion text. `ACCESS_LOG=false` switches it off.
"""

from __future__ import annotations

import json
import logging
from datetime import datetime

from llmserver.runtime.usage import UsageDraft

log = logging.getLogger("llmserver.access")


def _ms(start: datetime | None, end: datetime | None) -> float | None:
    if start is None or end is None:
        return None
    return round((end - start).total_seconds() * 1000, 1)


def access_record(draft: UsageDraft, model_label: str, elapsed: float) -> dict[str, object]:
    return {
        "request_id": draft.request_id,
        "tenant": draft.tenant_slug,
        "user": draft.user,
        "api_key_id": draft.api_key_id,
        "model": model_label,
        "tier": draft.tier,
        "band": draft.band,
        "backend": draft.backend or None,
        "status": str(draft.status),
        "error_type": draft.error_type or None,
        "prompt_tokens": draft.prompt_tokens,
        "completion_tokens": draft.completion_tokens,
        "queue_ms": _ms(draft.queued_at, draft.dispatched_at),
        "ttft_ms": _ms(draft.queued_at, draft.first_token_at),
        "duration_ms": round(elapsed * 1000, 1),
    }


def access_log(draft: UsageDraft, model_label: str, elapsed: float, enabled: bool) -> None:
    if enabled and log.isEnabledFor(logging.INFO):
        log.info(json.dumps(access_record(draft, model_label, elapsed)))
