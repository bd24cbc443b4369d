"""Accounting, on every ending of a request: the scheduler slot, the fair-share correction to the
real cost, the gateway's metrics and exactly one usage draft."""

from __future__ import annotations

from django.utils import timezone

from llmserver.cluster.transport import SchedulerTransport
from llmserver.runtime.observability import GatewayMetrics
from llmserver.runtime.pricing import Pricing
from llmserver.runtime.usage import UsageDraft, UsageWriter
from scheduling import Ticket
from tenants.models import UsageStatus


class Ledger:
    """Where a request's ending is recorded: the scheduler's slot and account, the gateway's
    metrics, the usage rows."""

    def __init__(
        self, scheduler: SchedulerTransport, metrics: GatewayMetrics, usage: UsageWriter
    ) -> None:
        self.scheduler, self.metrics, self.usage = scheduler, metrics, usage

    def settle(
        self, draft: UsageDraft, ticket: Ticket | None, pricing: Pricing, model_label: str
    ) -> None:
        """`draft` holds the request's final status and tokens; `model_label` is the public
        model name if it is configured, else "unknown" (labels must not grow with what clients
        send)."""
        if ticket is not None:
            cost = pricing.charge(draft.model, draft.prompt_tokens, draft.completion_tokens)
            if draft.status == UsageStatus.OK:
                self.scheduler.complete(ticket, cost)
            else:
                self.scheduler.cancel(ticket, cost)
        draft.finished_at = timezone.now()
        self.metrics.requests.labels(model_label, str(draft.band), draft.status).inc()
        if draft.status != UsageStatus.REJECTED or draft.error_type:
            self.metrics.tokens.labels(draft.tenant_slug, "prompt").inc(draft.prompt_tokens)
            self.metrics.tokens.labels(draft.tenant_slug, "completion").inc(draft.completion_tokens)
        self.usage.add(draft)
