"""One completion's way through the gateway, shared by the HTTP and WebSocket consumers.

Admission (model, key, budget, quota), then the scheduler's queue, then the backend it chose,
streamed through to a `Sink` without buffering. Whatever happens (success, error, a client that
disconnects and cancels this coroutine), the `finally` releases the scheduler slot and records
the usage.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
from typing import Any, Protocol

from asgiref.sync import sync_to_async
from django.utils import timezone

from llmserver.api.errors import ApiError, error_body, rate_limited
from llmserver.api.sse import DONE, EventSplitter, frame, is_usage_only, usage_of
from llmserver.api.validation import CompletionRequest
from llmserver.backends.upstream import BackendError
from llmserver.runtime.gateway import Gateway
from llmserver.runtime.keys import KeyInfo
from llmserver.runtime.usage import UsageDraft
from scheduling import (
    BATCH,
    Job,
    NoBackend,
    Principal,
    QueueFull,
    QueueTimeout,
    estimate_cost,
    real_cost,
)

PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions"}


class Sink(Protocol):
    """Where a completion goes: an HTTP response or a WebSocket."""

    async def start(self, status: int, headers: dict[str, str], stream: bool) -> None: ...
    async def event(self, payload: bytes) -> None: ...
    async def body(self, payload: bytes) -> None: ...
    async def finish(self) -> None: ...


def _admit_sync(key: KeyInfo, model: str) -> tuple[str | None, float, str]:
    """Budget and quota, in one trip to a worker thread. Returns (refusal code, retry, action)."""
    from tenants.budget import budget_state
    from tenants.models import ApiKey
    from tenants.quota import check_quota

    now = timezone.now()
    api_key = ApiKey.objects.select_related("tenant", "tenant__default_tier", "tier_override").get(
        pk=key.key_id
    )
    action = ""
    if key.has_budget:
        state = budget_state(api_key.tenant, now, tier=api_key.tier)
        if state.exceeded:
            if key.over_budget == "demote":
                action = "demote"
            else:
                return "budget_exceeded", _seconds_to_month_end(now), ""
    if key.has_quota_rules:
        decision = check_quota(api_key, model, now)
        if decision is not None:
            return "quota_exceeded", decision.retry_after, action
    return None, 0.0, action


def _seconds_to_month_end(now: Any) -> float:
    from tenants.models.rules import window_end

    return (window_end("month", now) - now).total_seconds()


class Completion:
    """The state of one request on its way through; `run()` does the work."""

    def __init__(
        self, gw: Gateway, key: KeyInfo, req: CompletionRequest, sink: Sink, request_id: str
    ) -> None:
        self.gw, self.key, self.req, self.sink, self.request_id = gw, key, req, sink, request_id
        self.band = max(key.band, BATCH) if req.wants_flex else key.band
        self.draft = UsageDraft(
            request_id=request_id,
            tenant_id=key.tenant_id,
            api_key_id=key.key_id,
            user=key.user,
            model=req.model,
            tier=key.tier_name,
            band=self.band,
            queued_at=timezone.now(),
            prompt_tokens=req.estimated_prompt_tokens,
            status="rejected",
        )
        self.arrived = time.monotonic()
        self.started = False
        self.streamed_chunks = 0

    async def run(self) -> None:
        gw, req = self.gw, self.req
        ticket = None
        dispatched = False
        try:
            pool = gw.config.routes.get(req.model) if gw.config else None
            if not pool:
                raise ApiError(
                    404,
                    f"The model '{req.model}' does not exist.",
                    "invalid_request_error",
                    "model",
                    "model_not_found",
                )
            if not self.key.allows_model(req.model):
                raise ApiError(
                    403,
                    f"This API key may not use the model '{req.model}'.",
                    "permission_error",
                    "model",
                    "model_not_allowed",
                )
            if self.key.has_budget or self.key.has_quota_rules:
                refusal, retry, action = await sync_to_async(_admit_sync, thread_sensitive=False)(
                    self.key, req.model
                )
                if refusal == "budget_exceeded":
                    raise rate_limited(
                        "Your organisation has used its monthly budget.", retry, refusal
                    )
                if refusal is not None:
                    raise rate_limited("You have exceeded a usage quota.", retry, refusal)
                if action == "demote":
                    self.band = self.draft.band = BATCH
            ticket = self._submit()
            failed: set[str] = set()
            while True:
                try:
                    backend = await ticket.dispatched()
                except QueueTimeout:
                    self.draft.error_type = "queue_timeout"
                    raise ApiError(
                        503,
                        "The request waited too long in the queue; try again later.",
                        "server_error",
                        None,
                        "queue_timeout",
                        {"retry-after": "5"},
                    ) from None
                dispatched = True
                self.draft.backend = backend
                self.draft.dispatched_at = timezone.now()
                self.gw.metrics.queue_wait.labels(str(self.band)).observe(
                    time.monotonic() - self.arrived
                )
                try:
                    await self._forward(backend, pool[backend])
                    self.draft.status = "ok"
                    return
                except BackendError as exc:
                    failed.add(backend)
                    if exc.retryable and not self.started and set(pool) - failed:
                        try:
                            gw.scheduler.requeue(ticket, backend)
                            dispatched = False
                            continue
                        except NoBackend:
                            pass
                    raise self._upstream_error(exc) from None
        except ApiError as exc:
            self.draft.status = "rejected" if not dispatched else "error"
            self.draft.error_type = self.draft.error_type or (exc.code or exc.type)
            if self.started:
                await self._stream_error(exc)
                return
            raise
        except asyncio.CancelledError:
            self.draft.status = "cancelled"
            raise
        except Exception:
            self.draft.status = "error"
            self.draft.error_type = self.draft.error_type or "internal_error"
            raise
        finally:
            if ticket is not None:
                cost = self._real_cost()
                if self.draft.status == "ok":
                    gw.scheduler.complete(ticket, cost)
                else:
                    gw.scheduler.cancel(ticket, cost)
            self.draft.finished_at = timezone.now()
            gw.metrics.requests.labels(req.model, str(self.band), self.draft.status).inc()
            if self.draft.status != "rejected" or self.draft.error_type:
                gw.metrics.tokens.labels(self.key.tenant_slug, "prompt").inc(
                    self.draft.prompt_tokens
                )
                gw.metrics.tokens.labels(self.key.tenant_slug, "completion").inc(
                    self.draft.completion_tokens
                )
            gw.usage.add(self.draft)

    def _submit(self) -> Any:
        req, key = self.req, self.key
        now = self.gw.clock()
        job = Job(
            id=self.request_id,
            principal=Principal(key.tenant_slug, key.user),
            model=req.model,
            band=self.band,
            weight=key.weight,
            estimated_cost=estimate_cost(
                self.gw.cost_unit,
                req.estimated_prompt_tokens,
                req.max_tokens,
                self.gw.conf["OUTPUT_TOKEN_WEIGHT"],
            ),
            estimated_output_tokens=req.max_tokens,
            prompt_tokens=req.estimated_prompt_tokens,
            prefix_key=req.prefix_key,
            deadline=now + key.queue_timeout,
            max_queued=key.max_queued,
            max_concurrent=key.max_concurrent,
        )
        try:
            return self.gw.scheduler.submit(job)
        except QueueFull as exc:
            self.draft.error_type = "queue_full"
            raise rate_limited(
                "You have too many requests queued; wait for some to finish.",
                exc.retry_after,
                "queue_full",
            ) from None
        except NoBackend:
            self.draft.error_type = "no_backend"
            raise ApiError(
                503,
                f"No healthy backend serves '{req.model}' right now.",
                "server_error",
                None,
                "no_backend",
                {"retry-after": "5"},
            ) from None

    def _real_cost(self) -> float:
        return real_cost(
            self.gw.cost_unit,
            self.draft.prompt_tokens,
            self.draft.completion_tokens,
            self.gw.conf["OUTPUT_TOKEN_WEIGHT"],
        )

    def _headers(self) -> dict[str, str]:
        return {
            "x-request-id": self.request_id,
            "x-queue-time-ms": f"{(time.monotonic() - self.arrived) * 1000:.1f}",
        }

    def _upstream_body(self, upstream_model: str) -> dict[str, Any]:
        body = dict(self.req.body)
        body["model"] = upstream_model
        if self.req.stream:
            body["stream_options"] = {**(body.get("stream_options") or {}), "include_usage": True}
        return body

    async def _forward(self, backend: str, upstream_model: str) -> None:
        client = self.gw.clients[backend]
        body = self._upstream_body(upstream_model)
        path = PATHS[self.req.kind]
        if not self.req.stream:
            _status, data = await client.complete(
                path, body, priority=self.band, request_id=self.request_id
            )
            self._first_token()
            usage = data.get("usage") if isinstance(data, dict) else None
            self._take_usage(usage)
            if isinstance(data, dict) and "model" in data:
                data["model"] = self.req.model
            await self.sink.start(200, self._headers(), stream=False)
            self.started = True
            await self.sink.body(json.dumps(data).encode())
            await self.sink.finish()
            return
        rename = None
        if upstream_model != self.req.model:
            rename = (json.dumps(upstream_model).encode(), json.dumps(self.req.model).encode())
        splitter = EventSplitter()
        async with contextlib.aclosing(
            client.stream_chat(path, body, priority=self.band, request_id=self.request_id)
        ) as chunks:
            async for chunk in chunks:
                await self._relay(splitter.feed(chunk), rename)
        if not self.started:
            raise BackendError(
                "The backend closed the stream without sending anything.", retryable=True
            )
        if self.draft.completion_tokens == 0:
            self.draft.completion_tokens = self.streamed_chunks
        await self.sink.event(DONE)
        await self.sink.finish()

    async def _relay(self, payloads: list[bytes], rename: tuple[bytes, bytes] | None) -> None:
        for payload in payloads:
            if payload == DONE:
                continue
            usage = usage_of(payload)
            if usage is not None:
                self._take_usage(usage)
                if not self.req.include_usage and is_usage_only(payload):
                    continue
            else:
                self.streamed_chunks += 1
            if rename is not None:
                payload = payload.replace(b'"model":' + rename[0], b'"model":' + rename[1])
                payload = payload.replace(b'"model": ' + rename[0], b'"model": ' + rename[1])
            if not self.started:
                self._first_token()
                await self.sink.start(200, self._headers(), stream=True)
                self.started = True
            await self.sink.event(payload)

    def _first_token(self) -> None:
        self.draft.first_token_at = timezone.now()
        self.gw.metrics.ttft.labels(str(self.band)).observe(time.monotonic() - self.arrived)

    def _take_usage(self, usage: dict[str, Any] | None) -> None:
        if not usage:
            return
        prompt, completion = usage.get("prompt_tokens"), usage.get("completion_tokens")
        if isinstance(prompt, int):
            self.draft.prompt_tokens = prompt
        if isinstance(completion, int):
            self.draft.completion_tokens = completion

    def _upstream_error(self, exc: BackendError) -> ApiError:
        self.draft.error_type = "upstream_error"
        status = exc.status or 0
        if 400 <= status < 500 and status != 429 and not exc.retryable:
            message = exc.message
            if isinstance(exc.body, dict):
                err = exc.body.get("error")
                if isinstance(err, dict) and isinstance(err.get("message"), str):
                    message = err["message"]
                elif isinstance(err, str):
                    message = err
            return ApiError(status, message, "invalid_request_error", None, "upstream_rejected")
        return ApiError(
            502, f"The backend failed: {exc.message}", "server_error", None, "upstream_error"
        )

    async def _stream_error(self, exc: ApiError) -> None:
        body = error_body(exc.message, exc.type, exc.param, exc.code)
        await self.sink.event(json.dumps(body).encode())
        await self.sink.event(DONE)
        await self.sink.finish()


__all__ = ["PATHS", "Completion", "Sink", "frame"]
