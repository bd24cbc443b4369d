"""Accounting, on every ending of a request: the scheduler slot, the fair-share correction to the
real cost, the gateway's metrics and exactly one usage draft."""

from __future__ import annotations

from collections.abc import Mapping

from django.utils import timezone

from llmserver.cluster.transport import SchedulerTransport
from llmserver.runtime.observability import GatewayMetrics
from llmserver.runtime.usage import UsageDraft, UsageWriter
from scheduling import CostPolicy, Ticket, job_cost
from tenants.models import UsageStatus


def charge(
    policy: CostPolicy,
    prices: Mapping[str, tuple[float, float]],
    model: str,
    prompt_tokens: int,
    completion_tokens: int,
) -> float:
    """A job's charge on its principal's account, in the policy's unit: the estimate at
    dispatch and the real figure at the end use this one rule. In `tokens`, the model's own
    weights where it has them; in `money`, the model's price in force (a model without a price
    costs nothing, as in the usage rows)."""
    price_in, price_out = prices.get(model, (0.0, 0.0))
    weights = policy.weights(model)
    return job_cost(
        policy.unit,
        prompt_tokens,
        completion_tokens,
        weights.output,
        price_in,
        price_out,
        weights.input,
    )


def settle(
    draft: UsageDraft,
    ticket: Ticket | None,
    scheduler: SchedulerTransport,
    policy: CostPolicy,
    metrics: GatewayMetrics,
    usage: UsageWriter,
    model_label: str,
    prices: Mapping[str, tuple[float, float]],
) -> None:
    """`draft` holds the request's final status and tokens; `model_label` is the public model
    name if it is configured, else "unknown" (labels must not grow with what clients send)."""
    if ticket is not None:
        cost = charge(policy, prices, draft.model, draft.prompt_tokens, draft.completion_tokens)
        if draft.status == UsageStatus.OK:
            scheduler.complete(ticket, cost)
        else:
            scheduler.cancel(ticket, cost)
    draft.finished_at = timezone.now()
    metrics.requests.labels(model_label, str(draft.band), draft.status).inc()
    if draft.status != UsageStatus.REJECTED or draft.error_type:
        metrics.tokens.labels(draft.tenant_slug, "prompt").inc(draft.prompt_tokens)
        metrics.tokens.labels(draft.tenant_slug, "completion").inc(draft.completion_tokens)
    usage.add(draft)
