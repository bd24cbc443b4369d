"""API key resolution on the request path, cached in-process.

A key is looked up in the database once, then served from memory until it expires from the
cache or an operator changes any key, tenant or tier (signals clear the whole cache: changes are
rare and a miss is one indexed query).
"""

from __future__ import annotations

import fnmatch
import time
from collections.abc import Callable
from dataclasses import dataclass

from asgiref.sync import sync_to_async

from tenants.models import ApiKey, QuotaRule


@dataclass(frozen=True, slots=True)
class KeyInfo:
    """What the request path needs to know about a key, detached from the ORM."""

    key_id: int
    tenant_id: int
    tenant_slug: str
    user: str
    tier_id: int
    tier_name: str
    band: int
    weight: float
    max_concurrent: int
    max_queued: int
    queue_timeout: float
    model_patterns: tuple[str, ...]
    has_quota_rules: bool
    has_budget: bool
    over_budget: str

    def allows_model(self, model: str) -> bool:
        return not self.model_patterns or any(
            fnmatch.fnmatchcase(model, p) for p in self.model_patterns
        )


def _load(secret: str) -> KeyInfo | None:
    key = ApiKey.objects.for_key(secret)
    if key is None:
        return None
    tier = key.tier
    has_rules = QuotaRule.objects.filter(tenant_id=key.tenant_id).exists() or (
        QuotaRule.objects.filter(tier_id=tier.pk).exists()
    )
    return KeyInfo(
        key_id=key.pk,
        tenant_id=key.tenant_id,
        tenant_slug=key.tenant.slug,
        user=key.user,
        tier_id=tier.pk,
        tier_name=tier.name,
        band=key.band,
        weight=tier.weight,
        max_concurrent=tier.max_concurrent_per_user,
        max_queued=tier.max_queued_per_user,
        queue_timeout=tier.queue_timeout_seconds,
        model_patterns=tuple(key.model_patterns()),
        has_quota_rules=has_rules,
        has_budget=key.tenant.monthly_budget is not None,
        over_budget=tier.over_budget,
    )


class KeyCache:
    def __init__(self, ttl: float, clock: Callable[[], float] = time.monotonic) -> None:
        self._ttl = ttl
        self._clock = clock
        self._entries: dict[str, tuple[float, KeyInfo | None]] = {}

    async def resolve(self, secret: str) -> KeyInfo | None:
        now = self._clock()
        hit = self._entries.get(secret)
        if hit is not None and hit[0] > now:
            return hit[1]
        info = await sync_to_async(_load, thread_sensitive=False)(secret)
        if len(self._entries) > 100_000:
            self._entries.clear()
        # Unknown keys are cached briefly too, so a flood of bad keys cannot hammer the database.
        self._entries[secret] = (now + (self._ttl if info else min(self._ttl, 2.0)), info)
        return info

    def clear(self) -> None:
        self._entries.clear()
