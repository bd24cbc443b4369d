"""One line of a batch through the same pipeline as an HTTP request: `Completion` with a sink
that keeps the answer instead of sending it.

So a line is admitted as the key's request (its rate limits, budget and quota), queued in its
principal's lane on the batch band, gated, relayed and billed with one usage row that names
its endpoint. A refusal that only means "not now" (429 rate limit or queue full, a 503) is
waited out and tried again; any other answer, a 2xx or an error (a budget or quota refusal, a
bad body, a backend failure), is the line's result.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import random
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from llmserver.batches.results import LineResult, usage_tokens
from llmserver.conf import GatewaySettings
from llmserver.pipeline.completion import Completion, new_request_id
from llmserver.pipeline.port import RequestPort
from llmserver.runtime.keys import KeyInfo
from llmserver.wire.agent_apis import validate_responses
from llmserver.wire.errors import ApiError, internal_error
from llmserver.wire.sse import DONE
from llmserver.wire.validation import CompletionRequest, validate
from tenants.endpoints import Endpoint

log = logging.getLogger(__name__)
# 429s that only say "later"; a budget or a quota refusal is the line's answer.
RETRIED_429 = frozenset({"rate_limit_exceeded", "queue_full"})
RETRY_WAIT_MIN, RETRY_WAIT_MAX = 0.5, 60.0


@dataclass(frozen=True, slots=True)
class Line:
    number: int
    custom_id: str
    body: dict[str, Any]


class KeepingSink:
    """A `Sink` that keeps a whole (non-streamed) answer; a batch line is never streamed."""

    needs_start = True
    embeds_events = False

    def __init__(self) -> None:
        self.status = 0
        self.parts: list[bytes] = []

    async def start(self, status: int, headers: dict[str, str], stream: bool) -> None:
        self.status = status

    async def queued(self, request_id: str, position: int, eta_s: float) -> None:
        return None

    async def dispatched(self, queue_time_ms: str) -> None:
        return None

    async def event(self, payload: bytes, name: bytes | None = None) -> None:
        # A whole answer gets an event only when it failed after it began: keep the error.
        if payload != DONE:
            self.parts, self.status = [payload], 502

    async def body(self, payload: bytes) -> None:
        self.parts.append(payload)

    async def finish(self) -> None:
        return None

    def json(self) -> Any:
        return json.loads(b"".join(self.parts))


def retried(exc: ApiError) -> bool:
    return exc.status == 503 or (exc.status == 429 and exc.code in RETRIED_429)


def retry_wait(exc: ApiError) -> float:
    try:
        wait = float(exc.headers.get("retry-after", "1"))
    except ValueError:
        wait = 1.0
    # A little spread, so a batch's lines refused together do not all come back together.
    return min(RETRY_WAIT_MAX, max(RETRY_WAIT_MIN, wait)) * random.uniform(1.0, 1.25)


def parse(
    kind: Endpoint, body: dict[str, Any], key: KeyInfo, conf: GatewaySettings
) -> CompletionRequest:
    limits = key.token_limits(conf)
    if kind == Endpoint.RESPONSES:
        return validate_responses(dict(body), limits)
    return validate(kind, dict(body), limits)


async def run_line(
    port: RequestPort,
    key: Callable[[], KeyInfo],
    kind: Endpoint,
    line: Line,
    stopped: asyncio.Event,
) -> LineResult | None:
    """The line's result, or None if the batch stopped (cancelled, expired, shut down) while
    the line was still waiting for its turn. `key()` is the owner's key as it is now."""
    while True:
        request_id = new_request_id(kind)
        sink = KeepingSink()
        try:
            owner = key()
            req = parse(kind, line.body, owner, port.settings)
            completion = Completion(port, owner, req, sink, request_id)
            await completion.run()
            body = sink.json()
        except ApiError as exc:
            if not retried(exc):
                return _answer(line, exc.status, request_id, exc.body())
            wait = retry_wait(exc)
        except Exception:
            log.exception("batch line %s (%s) failed", line.custom_id, request_id)
            error = internal_error()
            return _answer(line, error.status, request_id, error.body())
        else:
            # The usage row's counts, which are what the key is billed.
            draft = completion.draft
            answer = _answer(line, sink.status, request_id, body)
            return LineResult(
                line.custom_id,
                answer.ok,
                answer.record,
                draft.prompt_tokens,
                draft.completion_tokens,
            )
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stopped.wait(), wait)
        if stopped.is_set():
            return None


def _answer(line: Line, status: int, request_id: str, body: Any) -> LineResult:
    record = {
        "id": "batch_req_" + uuid.uuid4().hex[:24],
        "custom_id": line.custom_id,
        "response": {"status_code": status, "request_id": request_id, "body": body},
        "error": None,
    }
    ok = 200 <= status < 300
    tokens = usage_tokens(record) if ok else (0, 0)
    return LineResult(line.custom_id, ok, record, *tokens)


def not_run(custom_id: str, code: str, message: str) -> LineResult:
    """A line the batch ended without sending (its window ran out)."""
    record = {
        "id": "batch_req_" + uuid.uuid4().hex[:24],
        "custom_id": custom_id,
        "response": None,
        "error": {"code": code, "message": message},
    }
    return LineResult(custom_id, False, record)
