"""One completion, start to end: admission, dispatch with retry, relay, and accounting in
`finally`, whatever happens (success, an error, a client that disconnects and cancels this
coroutine). It depends on the process through its port (`RequestPort`) alone, and reports each
step once, to its events."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterable
from dataclasses import replace
from typing import Any

from django.utils import timezone

from llmserver.backends.upstream import BackendError
from llmserver.pipeline import responses
from llmserver.pipeline.accounting import Ledger
from llmserver.pipeline.admission import Admission, admit, check_rates, served_tier
from llmserver.pipeline.dispatch import run_on_pool, submit
from llmserver.pipeline.port import RequestPort
from llmserver.pipeline.relay import Relay, Sink
from llmserver.pipeline.resume import Preempted
from llmserver.runtime.access import access_log
from llmserver.runtime.keys import KeyInfo
from llmserver.runtime.usage import UsageDraft
from llmserver.wire.errors import ApiError, shutting_down
from llmserver.wire.validation import CompletionRequest
from scheduling import Job, Principal, Ticket
from tenants.endpoints import POOLING, Endpoint
from tenants.models import UsageStatus

QUEUE_REPORT_SECONDS = 1.0


def new_request_id(kind: str = Endpoint.CHAT) -> str:
    """The server's id for one request, in OpenAI's shape; used for the usage row, the backend
    and `x-request-id`, and as the id of the response the client gets (a Responses request's
    is `resp_...`, the id a later `previous_response_id` names). Never derived from anything a
    client sends, so it is always unique and always fits the usage column."""
    prefix = "resp_" if kind == Endpoint.RESPONSES else "chatcmpl-"
    return prefix + uuid.uuid4().hex[:24]


class Completion:
    def __init__(
        self,
        port: RequestPort,
        key: KeyInfo,
        req: CompletionRequest,
        sink: Sink,
        request_id: str,
        client_headers: Iterable[tuple[bytes, bytes]] = (),
    ) -> None:
        """`client_headers`: the HTTP request's, where a client's trace context may be."""
        self.port, self.key, self.req, self.request_id = port, key, req, request_id
        self.events = port.events(request_id, key, req, client_headers)
        self.pricing = port.pricing(key.tenant_id)  # the prices in force when it arrived
        self.relay = Relay(sink, req, self._headers, request_id)
        self.arrived = time.monotonic()
        self.dispatched_at: float | None = None
        self.ticket: Ticket | None = None
        self.reporter: asyncio.Future[None] | None = None
        self._reporting = asyncio.Lock()
        self.rate_headers: dict[str, str] = {}  # x-ratelimit-*, on every response once known
        self.conversation: list[Any] | None = None  # a Responses request's, to keep with it
        self.draft = UsageDraft(
            request_id=request_id,
            tenant_id=key.tenant_id,
            tenant_slug=key.tenant_slug,
            api_key_id=key.key_id,
            user=key.user,
            model=req.model,
            tier=key.tier_name,
            band=key.band,
            queued_at=timezone.now(),
            prompt_tokens=req.estimated_prompt_tokens,
            status=UsageStatus.REJECTED,
            endpoint=req.kind,
        )

    @property
    def started(self) -> bool:
        """Whether the client has had the first byte (an error can then only be an event)."""
        return self.relay.opened

    async def _admit(self) -> Admission:
        """The rate windows, then the pool, models, quota and budget (`admit`), then the
        prompt's token blocks where its pool routes by the backends' caches."""
        port, req = self.port, self.req
        self.events.admitting()
        tokens = req.estimated_prompt_tokens + req.most_output_tokens
        self.rate_headers = await check_rates(port.limits.rates, self.key, tokens)
        admission = await admit(
            self.key,
            req,
            port.pool(req.model, req.kind),
            port.limits.holds,
            self.request_id,
            self.pricing.prices,
        )
        self.draft.band = admission.band
        if req.service_tier is not None:
            self.relay.service_tier = served_tier(req.service_tier, admission.band)
        blocks = await port.token_blocks(req.model, req.kind, req.body, self.request_id)
        if blocks is not None:
            req.prefix_blocks = blocks
        return admission

    async def run(self) -> None:
        port, ticket = self.port, None
        task = asyncio.current_task()
        assert task is not None
        port.inflight.enter(task, self.request_id, self.key.tenant_id, self.key.user)
        try:
            if port.inflight.draining:
                raise shutting_down()
            if self.req.kind == Endpoint.RESPONSES:
                # Before anything is queued: a previous response not this key's is a 404.
                self.conversation = await responses.continue_conversation(self.key, self.req)
                if self.req.store:
                    self.relay.keep = self._keep_response
            admission = await self._admit()
            job = self._job(admission.band, frozenset(admission.pool))
            ticket = self.ticket = submit(port.scheduler, job)
            self.events.queued(admission.band)
            if self.req.stream or not self.relay.sink.needs_start:
                self.reporter = asyncio.ensure_future(self._report_while_queued())
            await run_on_pool(port.scheduler, ticket, admission.pool, self)
            self.draft.status = UsageStatus.OK
        except ApiError as exc:
            dispatched = ticket is not None and ticket.backend is not None
            self.draft.status = UsageStatus.ERROR if dispatched else UsageStatus.REJECTED
            self.draft.error_type = exc.code or exc.type
            exc.headers = {**self.rate_headers, **exc.headers}
            await self._stop_reporting()
            if not self.relay.opened:
                raise
            await self.relay.fail(exc)
        except asyncio.CancelledError:
            if not port.inflight.stopping:
                self.draft.status = UsageStatus.CANCELLED
                raise
            # The drain ran out of time: end this request cleanly instead of cutting it.
            self.draft.status = UsageStatus.ERROR
            self.draft.error_type = "shutting_down"
            await self._stop_reporting()
            if not self.relay.opened:
                raise shutting_down() from None
            await self.relay.fail(shutting_down())
        except Exception:
            self.draft.status = UsageStatus.ERROR
            self.draft.error_type = "internal_error"
            raise
        finally:
            port.inflight.leave(task, self.request_id)
            self._account(ticket)

    async def _keep_response(self, response: dict[str, Any]) -> None:
        """The relay's hook for a Responses answer, before its client has the end of it. Only
        an id the gateway made is kept: an engine's own could name another's response."""
        if self.conversation is not None and response.get("id") == self.request_id:
            days = self.port.settings.responses_retention_days
            await responses.remember(self.key, self.req, self.conversation, response, days)

    def _account(self, ticket: Ticket | None) -> None:
        """The request's one ending, whatever it was: the access log, `settle()` (slot
        released, account corrected, the usage row), and the ending's event."""
        port = self.port
        if self.reporter is not None:
            self.reporter.cancel()
        self._observe_service_time()
        self._count_tokens()
        if self.dispatched_at is None:
            # Refused, expired or cancelled before any backend saw it: nothing was served, so
            # nothing is billed; the row (its status and error) still shows the refusal.
            self.draft.prompt_tokens = self.draft.completion_tokens = 0
        model_label = self.req.model if self.req.model in port.routes() else "unknown"
        if self.draft.error_type == "model_not_found":
            # A name no route serves is whatever a client typed: the reports group by model, so
            # it is recorded as "unknown" (the client's error says which name was refused).
            self.draft.model = "unknown"
        elapsed = time.monotonic() - self.arrived
        access_log(self.draft, model_label, elapsed, port.settings.access_log)
        self.events.settling()
        try:
            Ledger(port.scheduler, port.usage).settle(self.draft, ticket, self.pricing)
        finally:
            self.events.finish(self.draft, model_label, elapsed)

    def _job(self, band: int, pool: frozenset[str]) -> Job:
        port, key, req = self.port, self.key, self.req
        principal = Principal(key.tenant_slug, key.user)
        single = req.n == 1
        return Job(
            id=self.request_id,
            principal=principal,
            model=req.model,
            band=band,
            # A stream of several choices cannot be continued as one: it is never paused.
            policy=replace(key.policy, preemptible=key.policy.preemptible and single),
            estimated_cost=self.pricing.charge(
                req.model, req.estimated_prompt_tokens, req.most_output_tokens
            ),
            estimated_output_tokens=req.n
            * port.estimates.output_tokens(principal, req.model, req.max_tokens),
            estimated_prompt_tokens=req.estimated_prompt_tokens,
            prefix_blocks=req.prefix_blocks,
            deadline=None if key.queue_window is None else port.clock() + key.queue_window,
            patience=key.queue_timeout,
            demoted=band > key.band,
            # Only the backends serving its endpoint, where not every backend of the model does.
            backends=None if pool == set(port.routes().get(req.model, ())) else pool,
        )

    def cost_so_far(self) -> float:
        """What a preempted run generated, in the scheduler's unit: its prompt and the tokens
        delivered (a resumed run's re-prefill is the gateway's doing, not charged)."""
        prompt = self.relay.reported_prompt or self.req.estimated_prompt_tokens
        return self.pricing.charge(self.req.model, prompt, self.relay.completion_tokens)

    def has_output(self) -> bool:
        return self.relay.started

    async def _report_while_queued(self) -> None:
        """Every QUEUE_REPORT_SECONDS while the job waits: its position and a wait estimate."""
        port = self.port
        while True:
            await asyncio.sleep(QUEUE_REPORT_SECONDS)
            where = port.scheduler.position(self.request_id)
            if where is None or where.state != "queued":
                return
            eta = port.estimates.wait(self.req.model, where.position, where.running)
            async with self._reporting:
                await self.relay.report_queued(where.position, eta)

    async def _stop_reporting(self) -> None:
        """Before anything else writes: a report being sent ends first (never cut in half)."""
        if self.reporter is not None:
            async with self._reporting:
                self.reporter.cancel()
            self.reporter = None

    def _observe_service_time(self) -> None:
        """A request that ended well teaches the wait estimate and the answer-length estimate."""
        generates = self.req.kind not in POOLING
        if self.dispatched_at is not None and self.draft.status == UsageStatus.OK and generates:
            elapsed = time.monotonic() - self.dispatched_at
            principal = Principal(self.key.tenant_slug, self.key.user)
            self.port.estimates.learn(
                principal, self.req.model, elapsed, self.relay.completion_tokens
            )

    async def forward(self, backend: str, upstream_model: str, priority: int) -> None:
        port = self.port
        self.draft.backend = backend
        queue_wait = None
        if self.dispatched_at is None:  # the first dispatch; a resumed run is not queue time
            self.dispatched_at = time.monotonic()
            self.draft.dispatched_at = timezone.now()
            queue_wait = self.dispatched_at - self.arrived
            await self._stop_reporting()
        client = port.client(backend)
        evict = (
            self.ticket if self.ticket is not None and self.ticket.job.policy.preemptible else None
        )
        trace_headers = self.events.dispatched(
            backend, upstream_model, client, self.relay.started, queue_wait
        )
        try:
            await self.relay.forward(
                client, upstream_model, priority, evict, client.profile.resumable, trace_headers
            )
        except Preempted:
            if evict is not None and evict.recalled:
                kind = "recalled"  # called back from the engine's queue: no eviction
            else:
                kind = "resumable" if self.relay.started else "before_first_token"
            self.events.preempted(kind)
            raise
        except BackendError as exc:
            kind = f"http_{exc.status // 100}xx" if exc.status else "transport"
            self.events.upstream_failed(kind, exc.message)
            if self.relay.resuming and exc.status is not None and 400 <= exc.status < 500:
                port.stop_preempting(backend, exc.message)
                raise BackendError(
                    "The backend refused to continue this answer after a pause "
                    f"({exc.message}); the answer ends here.",
                    retryable=False,
                    status=exc.status,
                ) from None
            raise
        finally:
            self.events.forwarded()

    def _headers(self) -> dict[str, str]:
        """Sent with the first byte, which is also the first token."""
        self.draft.first_token_at = timezone.now()
        now = time.monotonic()
        self.events.first_token(now - self.arrived)
        queued = (self.dispatched_at or now) - self.arrived
        return {
            "x-request-id": self.request_id,
            "x-queue-time-ms": f"{queued * 1000:.1f}",
            **self.rate_headers,
        }

    def _count_tokens(self) -> None:
        if self.relay.reported_prompt is not None:
            self.draft.prompt_tokens = self.relay.reported_prompt
        self.draft.completion_tokens = self.relay.completion_tokens
