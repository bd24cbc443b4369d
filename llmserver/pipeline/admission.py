"""Admission: may this key send this request now, and in which band? One database trip at most.

The route and the key's allowed models come from memory; budget and quota, only for keys that
have them, from one trip to a worker thread. Every refusal is an `ApiError`.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal

from django.utils import timezone
from redis.exceptions import RedisError

from llmserver.runtime.db import run_db
from llmserver.runtime.keys import KeyInfo
from llmserver.runtime.ratelimit import SlidingWindow, WindowState
from llmserver.runtime.reservations import (
    Reservation,
    Reservations,
    Written,
    held_cost,
    pending,
)
from llmserver.wire.errors import (
    ApiError,
    endpoint_not_served,
    limits_unavailable,
    model_not_allowed,
    model_not_found,
    rate_limited,
)
from llmserver.wire.validation import CompletionRequest
from scheduling import BATCH, INTERACTIVE
from tenants.budget import standing
from tenants.models import OverBudget
from tenants.models.rules import priced
from tenants.quota import check_quota_for

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Admission:
    pool: Mapping[str, str]  # backend name -> the backend's own model name
    band: int


@dataclass(frozen=True, slots=True)
class LimitVerdict:
    refusal: ApiError | None = None
    demote: bool = False


def served_tier(asked: str, band: int) -> str:
    """The `service_tier` a response names, as OpenAI's does: how it was served. "flex" runs on
    the batch band; "priority" is honoured only for a key whose tier is interactive already
    (it never lifts a request above its tier); anything else is "default"."""
    if asked == "flex" and band == BATCH:
        return "flex"
    if asked == "priority" and band == INTERACTIVE:
        return "priority"
    return "default"


async def admit(
    key: KeyInfo,
    req: CompletionRequest,
    pool: Mapping[str, str] | None,
    reservations: Reservations,
    request_id: str,
    prices: Mapping[str, tuple[float, float]],
) -> Admission:
    """Refuse, or admit in a band. An admitted request of a key under quota holds a reservation
    until its usage row is written, and the check and the hold happen under the tenant's lock,
    so a burst cannot overshoot a quota."""
    if pool is None:
        raise model_not_found(req.model)
    if not key.allows_model(req.model):
        raise model_not_allowed(req.model)
    if not pool:
        raise endpoint_not_served(req.model, req.kind)
    band = max(key.band, BATCH) if req.wants_flex else key.band
    if key.monthly_budget is not None or key.key_budget is not None or key.has_quota_rules:
        try:
            verdict = await _check_and_hold(key, req, reservations, request_id, prices)
        except (RedisError, TimeoutError) as exc:
            log.warning("quota reservations unavailable: %s", exc)
            raise limits_unavailable() from exc
        if verdict.demote:
            band = BATCH
    return Admission(pool, band)


async def _check_and_hold(
    key: KeyInfo,
    req: CompletionRequest,
    reservations: Reservations,
    request_id: str,
    prices: Mapping[str, tuple[float, float]],
) -> LimitVerdict:
    async with reservations.guard(key.tenant_id):
        held = await reservations.of_tenant(key.tenant_id)
        budgeted = key.monthly_budget is not None or key.key_budget is not None
        written = await reservations.written_lately(key.tenant_id) if budgeted else ()
        verdict = await run_db(check_limits, key, req.model, held, written)
        if verdict.refusal is not None:
            raise verdict.refusal
        price_in, price_out = prices.get(req.model, (0.0, 0.0))
        cost = priced(
            req.estimated_prompt_tokens,
            req.most_output_tokens,
            Decimal(str(price_in)),
            Decimal(str(price_out)),
        )
        tokens = req.estimated_prompt_tokens + req.most_output_tokens
        reservation = Reservation(key.tenant_id, key.user, req.model, tokens, key.key_id, cost)
        await reservations.hold(request_id, reservation)
    return verdict


@dataclass(frozen=True, slots=True)
class RateWindow:
    """One sliding-minute window a request is taken from: its unit as OpenAI's headers name it
    ("requests", "tokens") and as its message does ("RPM", "TPM"), the window's name in the
    store, its limit (None: none set) and what this request takes from it."""

    unit: str
    short: str
    name: str
    limit: int | None
    amount: int


def rate_windows(key: KeyInfo, tokens: int) -> list[RateWindow]:
    """The key's and its tenant's windows, requests before tokens, in the order taken."""
    return [
        RateWindow("requests", "RPM", f"r:key:{key.key_id}", key.rpm_per_key, 1),
        RateWindow("requests", "RPM", f"r:tenant:{key.tenant_id}", key.tenant_rpm, 1),
        RateWindow("tokens", "TPM", f"t:key:{key.key_id}", key.tpm_per_key, tokens),
        RateWindow("tokens", "TPM", f"t:tenant:{key.tenant_id}", key.tenant_tpm, tokens),
    ]


async def check_rates(window: SlidingWindow, key: KeyInfo, tokens: int) -> dict[str, str]:
    """The key's and its tenant's requests- and tokens-per-minute windows, in OpenAI's terms:
    returns the x-ratelimit-* headers (the tightest window of each unit), or raises a 429 that
    carries them and Retry-After. As at OpenAI, a request refused later still counts."""
    tightest: dict[str, WindowState] = {}
    for w in rate_windows(key, tokens):
        if w.limit is None:
            continue
        try:
            state = await window.take(w.name, w.amount, w.limit)
        except RedisError as exc:
            log.warning("rate-limit windows unavailable: %s", exc)
            raise limits_unavailable() from exc
        if not state.allowed:
            used = state.limit - state.remaining
            message = (
                f"Rate limit reached for {w.unit} per minute ({w.short}): Limit {state.limit}, "
                f"Used {used}, Requested {w.amount}. Please try again in "
                f"{_duration(state.reset_seconds)}."
            )
            refusal = rate_limited(message, state.reset_seconds, "rate_limit_exceeded")
            # The units taken whole before this one, then this window's.
            for unit, other in tightest.items():
                if unit != w.unit:
                    refusal.headers.update(_rate_headers(unit, other))
            refusal.headers.update(_rate_headers(w.unit, state))
            raise refusal
        held = tightest.get(w.unit)
        if held is None or state.remaining < held.remaining:
            tightest[w.unit] = state
    headers: dict[str, str] = {}
    for unit, state in tightest.items():
        headers.update(_rate_headers(unit, state))
    return headers


def _rate_headers(unit: str, state: WindowState) -> dict[str, str]:
    return {
        f"x-ratelimit-limit-{unit}": str(state.limit),
        f"x-ratelimit-remaining-{unit}": str(state.remaining),
        f"x-ratelimit-reset-{unit}": _duration(state.reset_seconds),
    }


def _duration(seconds: float) -> str:
    """OpenAI's reset format: "1s", "6m0s", "250ms"."""
    if seconds < 1:
        return f"{round(seconds * 1000)}ms"
    minutes, rest = divmod(seconds, 60)
    return f"{int(minutes)}m{rest:.3g}s" if minutes else f"{rest:.3g}s"


def check_limits(
    key: KeyInfo,
    model: str,
    held: tuple[Reservation, ...] = (),
    written: tuple[Written, ...] = (),
) -> LimitVerdict:
    """The tenant's budget, the key's own, then quota; runs in a worker thread (it reads usage
    from the database). `held` are the tenant's requests admitted and not yet recorded, by any
    process; `written` what other processes recorded lately (`Reservations.written_lately`)."""
    now = timezone.now()
    demote = False
    budgets = (
        (key.monthly_budget, None, "Your organisation has used its monthly budget."),
        (key.key_budget, key.key_id, "This API key has used its monthly budget."),
    )
    for budget, key_id, message in budgets:
        if budget is None:
            continue
        admitted = held_cost(held, key_id)
        lately = [(w.at, w.cost) for w in written if key_id is None or w.key_id == key_id]
        state = standing(key.tenant_id, budget, key.over_budget, now, key_id, admitted, lately)
        if state.exceeded and state.action != OverBudget.DEMOTE:
            retry = (state.month_end - now).total_seconds()
            return LimitVerdict(rate_limited(message, retry, "budget_exceeded"))
        demote = demote or state.exceeded
    if key.has_quota_rules:
        decision = check_quota_for(
            key.tenant_id, key.tier_id, key.user, model, now, pending(held, key.user)
        )
        if decision is not None:
            message = "You have exceeded a usage quota."
            return LimitVerdict(rate_limited(message, decision.retry_after, "quota_exceeded"))
    return LimitVerdict(demote=demote)
