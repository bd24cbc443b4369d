"""API key resolution on the request path, cached in-process.

A key is looked up in the database once, then served from memory until it expires from the
cache or an operator changes any key, tenant or tier (signals clear the whole cache: changes are
rare and a miss is one indexed query). Signals only reach the process that saved; a key revoked,
expired or deleted by another process (the command line, another gateway) is found by
`unusable_key_ids`, which the gateway runs on the cached keys every half second. The cache is keyed by a hash of the secret, never the
secret itself, and holds at most `max_entries` keys (least recently used go first), so a flood of
long bad keys costs bounded memory.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal

from django.db.models import Q
from django.utils import timezone

from llmserver.runtime.db import run_db
from tenants.models import ApiKey, QuotaRule
from tenants.models.keys import patterns_allow

MAX_ENTRIES = 10_000
UNKNOWN_KEY_SECONDS = 2.0


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
    monthly_budget: Decimal | None
    over_budget: str
    preemptible: bool = True
    preempt_after: float | None = None

    def allows_model(self, model: str) -> bool:
        return patterns_allow(self.model_patterns, model)


def load_key(secret: str) -> KeyInfo | None:
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
        monthly_budget=key.tenant.monthly_budget,
        over_budget=str(tier.over_budget),
        preemptible=tier.preemptible,
        preempt_after=None if tier.preempt_after_ms is None else tier.preempt_after_ms / 1000.0,
    )


def unusable_key_ids(key_ids: set[int], chunk: int = 500) -> set[int]:
    """Which of these keys may no longer be used: revoked, expired or gone. One query per
    `chunk` ids (SQLite caps the parameters of one query)."""
    ordered = sorted(key_ids)
    usable: set[int] = set()
    now = timezone.now()
    for start in range(0, len(ordered), chunk):
        usable.update(
            ApiKey.objects.filter(pk__in=ordered[start : start + chunk], revoked=False)
            .filter(Q(expires_at__isnull=True) | Q(expires_at__gt=now))
            .values_list("pk", flat=True)
        )
    return key_ids - usable


class KeyCache:
    def __init__(
        self,
        ttl: float,
        clock: Callable[[], float] = time.monotonic,
        max_entries: int = MAX_ENTRIES,
    ) -> None:
        self._ttl = ttl
        self._clock = clock
        self._max = max_entries
        self._entries: OrderedDict[bytes, tuple[float, KeyInfo | None]] = OrderedDict()

    async def resolve(self, secret: str) -> KeyInfo | None:
        now = self._clock()
        digest = hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()
        hit = self._entries.get(digest)
        if hit is not None and hit[0] > now:
            self._entries.move_to_end(digest)
            return hit[1]
        info = await run_db(load_key, secret)
        # Unknown keys are cached briefly too, so a flood of bad keys cannot hammer the database.
        ttl = self._ttl if info else min(self._ttl, UNKNOWN_KEY_SECONDS)
        self._entries[digest] = (now + ttl, info)
        self._entries.move_to_end(digest)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)
        return info

    def key_ids(self) -> set[int]:
        """The ids of the usable keys held now."""
        return {info.key_id for _, info in self._entries.values() if info is not None}

    def forget(self, key_ids: set[int]) -> None:
        """Drop the entries of these keys; their next request reads the database."""
        for digest, (_, info) in list(self._entries.items()):
            if info is not None and info.key_id in key_ids:
                del self._entries[digest]

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
