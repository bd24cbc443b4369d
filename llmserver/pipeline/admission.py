"""Admission: may this key send this request now, and in which band? One database trip at most.

The route and the key's allowed models come from memory; budget and quota, only for keys that
have them, from one trip to a worker thread. Every refusal is an `ApiError`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from django.utils import timezone

from llmserver.api.errors import ApiError, model_not_allowed, model_not_found, rate_limited
from llmserver.api.validation import CompletionRequest
from llmserver.runtime.db import run_db
from llmserver.runtime.keys import KeyInfo
from llmserver.runtime.reservations import Reservation, Reservations, pending
from scheduling import BATCH
from tenants.budget import standing
from tenants.models import OverBudget
from tenants.quota import check_quota_for


@dataclass(frozen=True, slots=True)
class Admission:
    pool: Mapping[str, str]  # backend name -> the backend's own model name
    band: int


@dataclass(frozen=True, slots=True)
class LimitVerdict:
    refusal: ApiError | None = None
    demote: bool = False


async def admit(
    key: KeyInfo,
    req: CompletionRequest,
    routes: Mapping[str, Mapping[str, str]],
    reservations: Reservations,
    request_id: str,
) -> Admission:
    """Refuse, or admit in a band. An admitted request of a key under quota holds a reservation
    until its usage row is written, and the check and the hold happen under the tenant's lock,
    so a burst cannot overshoot a quota."""
    pool = routes.get(req.model)
    if not pool:
        raise model_not_found(req.model)
    if not key.allows_model(req.model):
        raise model_not_allowed(req.model)
    band = max(key.band, BATCH) if req.wants_flex else key.band
    if key.monthly_budget is not None or key.has_quota_rules:
        async with reservations.lock(key.tenant_id):
            held = reservations.of_tenant(key.tenant_id)
            verdict = await run_db(check_limits, key, req.model, held)
            if verdict.refusal is not None:
                raise verdict.refusal
            if key.has_quota_rules:
                tokens = req.estimated_prompt_tokens + req.max_tokens
                reservations.hold(
                    request_id, Reservation(key.tenant_id, key.user, req.model, tokens)
                )
        if verdict.demote:
            band = BATCH
    return Admission(pool, band)


def check_limits(key: KeyInfo, model: str, held: tuple[Reservation, ...] = ()) -> LimitVerdict:
    """Budget, then quota; runs in a worker thread (it reads usage from the database)."""
    now = timezone.now()
    demote = False
    if key.monthly_budget is not None:
        state = standing(key.tenant_id, key.monthly_budget, key.over_budget, now)
        if state.exceeded and state.action != OverBudget.DEMOTE:
            retry = (state.month_end - now).total_seconds()
            message = "Your organisation has used its monthly budget."
            return LimitVerdict(rate_limited(message, retry, "budget_exceeded"))
        demote = state.exceeded
    if key.has_quota_rules:
        decision = check_quota_for(
            key.tenant_id, key.tier_id, key.user, model, now, pending(held, key.user)
        )
        if decision is not None:
            message = "You have exceeded a usage quota."
            return LimitVerdict(rate_limited(message, decision.retry_after, "quota_exceeded"))
    return LimitVerdict(demote=demote)
