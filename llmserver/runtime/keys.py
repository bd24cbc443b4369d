"""API key resolution on the request path, cached in-process.

A key is looked up in the database once, then served from memory until its entry expires (after
the cache's ttl, or when the key itself expires, whichever is first) or the configuration
changes: the gateway clears the whole cache on any change, by this process or any other (the
database counts them: `tenants.models.config_changes`); changes are rare and a miss is one
indexed query. The cache is keyed by a hash of the secret, never the secret itself, and holds at
most `max_entries` keys (least recently used go first), so a flood of long bad keys costs
bounded memory; `drop_expired` gives back what keys no longer used held.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.utils import timezone

from llmserver.conf import GatewaySettings
from llmserver.runtime.db import run_db
from llmserver.wire.validation import TokenLimits
from scheduling import TierPolicy
from tenants.models import ApiKey, QuotaRule
from tenants.models.keys import patterns_allow
from tenants.visibility import acts_as_administrator

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
    policy: TierPolicy
    # Seconds a request may wait while its user's queue for the model does not move.
    queue_timeout: float
    model_patterns: tuple[str, ...]
    has_quota_rules: bool
    monthly_budget: Decimal | None
    over_budget: str
    rpm_per_key: int | None = None
    tpm_per_key: int | None = None
    tenant_rpm: int | None = None
    tenant_tpm: int | None = None
    key_budget: Decimal | None = None
    max_output_tokens: int | None = None  # the tier's maximum per answer
    expires_at: datetime | None = None
    # An administrator's own key sees the whole tenant's objects; any other its user's
    # (`tenants/visibility.py`).
    sees_tenant: bool = False
    # Seconds a request may wait in the queue at most, moving or not (a batch line's window).
    queue_window: float | None = None

    def sees(self, tenant_id: int, user: str) -> bool:
        """Whether this key may see an object of `tenant_id` made for `user`."""
        return tenant_id == self.tenant_id and (self.sees_tenant or user == self.user)

    def allows_model(self, model: str) -> bool:
        return patterns_allow(self.model_patterns, model)

    def token_limits(self, settings: GatewaySettings) -> TokenLimits:
        return TokenLimits(
            settings.default_max_tokens, settings.max_tokens_limit, self.max_output_tokens
        )


def load_key(secret: str) -> KeyInfo | None:
    key = ApiKey.objects.for_key(secret)
    return key_info(key) if key is not None else None


def key_info(key: ApiKey) -> KeyInfo:
    """What the request path needs of a usable key (with its tenant and tier loaded)."""
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
        policy=tier.scheduling_policy(),
        queue_timeout=tier.queue_timeout_seconds,
        model_patterns=tuple(key.model_patterns()),
        has_quota_rules=has_rules,
        monthly_budget=key.tenant.monthly_budget,
        over_budget=str(tier.over_budget),
        rpm_per_key=tier.rpm_per_key,
        tpm_per_key=tier.tpm_per_key,
        tenant_rpm=key.tenant.rpm_limit,
        tenant_tpm=key.tenant.tpm_limit,
        key_budget=key.monthly_budget,
        max_output_tokens=tier.max_output_tokens,
        expires_at=key.expires_at,
        sees_tenant=acts_as_administrator(key),
    )


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
        # Moves at every `clear` (any configuration change, from any thread): a holder of a key
        # resolved earlier (an open WebSocket) resolves it again when this moved.
        self.generation = 0

    async def resolve(self, secret: str) -> KeyInfo | None:
        now = self._clock()
        digest = hashlib.sha256(secret.encode("utf-8", "surrogatepass")).digest()
        hit = self._entries.get(digest)
        if hit is not None and hit[0] > now:
            self._entries.move_to_end(digest)
            return hit[1]
        generation = self.generation
        info = await run_db(load_key, secret)
        if self.generation != generation:
            # A change was committed while this read ran: what it read may be from before it,
            # and a cache entry would outlive the clear that should have dropped it.
            return info
        # Unknown keys are cached briefly too, so a flood of bad keys cannot hammer the database.
        ttl = self._ttl if info else min(self._ttl, UNKNOWN_KEY_SECONDS)
        if info is not None and info.expires_at is not None:
            ttl = min(ttl, (info.expires_at - timezone.now()).total_seconds())
        self._entries[digest] = (now + ttl, info)
        self._entries.move_to_end(digest)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)
        return info

    def drop_expired(self) -> None:
        """Give back the memory of entries past their time (keys not used since)."""
        now = self._clock()
        for digest in [d for d, (until, _) in self._entries.items() if until <= now]:
            del self._entries[digest]

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self.generation += 1
