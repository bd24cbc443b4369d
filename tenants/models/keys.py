"""API keys: shown once, stored as a prefix plus a SHA-256 hash, looked up in constant time.

A key is `sk-llms-` followed by 40 random URL-safe characters; the first 16 characters of the
whole key are its prefix (indexed, unique), and the hash covers the whole key. Keys carry 240 bits
of randomness, so an unsalted SHA-256 is as strong as a slow hash here and keeps lookups cheap.
"""

from __future__ import annotations

import fnmatch
import hashlib
import hmac
import secrets
from collections.abc import Sequence
from datetime import datetime

from django.conf import settings
from django.core.validators import MinValueValidator
from django.db import models
from django.utils import timezone

from tenants.models.tenants import Tenant
from tenants.models.tiers import Band, Tier

KEY_SCHEME = "sk-llms-"
PREFIX_LENGTH = 16
_RANDOM_CHARS = 40
# A stand-in hash for prefixes that match nothing, so a miss costs the same compare as a hit.
_DUMMY_HASH = hashlib.sha256(b"no such key").hexdigest()


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def generate_key() -> str:
    while True:
        key = KEY_SCHEME + secrets.token_urlsafe(30)[:_RANDOM_CHARS]
        if len(key) == len(KEY_SCHEME) + _RANDOM_CHARS:
            return key


class AppType(models.TextChoices):
    """What the key is used from; it may lower the tier's band, never raise it."""

    CHAT = "chat", "chat UI (interactive)"
    API = "api", "API integration (standard)"
    BATCH = "batch", "batch jobs"


APP_TYPE_BAND = {
    AppType.CHAT: Band.INTERACTIVE,
    AppType.API: Band.STANDARD,
    AppType.BATCH: Band.BATCH,
}


class ApiKeyManager(models.Manager["ApiKey"]):
    def create_key(self, **fields: object) -> tuple[ApiKey, str]:
        """Create a key and return it with its secret, which is never stored or shown again."""
        key = self.model(**fields)
        secret = key.set_new_secret()
        key.save(force_insert=True, using=self.db)
        return key, secret

    def for_key(self, secret: str, now: datetime | None = None) -> ApiKey | None:
        """The usable key this secret belongs to, or None (unknown, wrong, revoked or expired)."""
        if not secret.startswith(KEY_SCHEME) or len(secret) > 256:
            hmac.compare_digest(_DUMMY_HASH, hash_key(secret[:256]))
            return None
        candidate = (
            self.select_related("tenant", "tenant__default_tier", "tier_override")
            .filter(prefix=secret[:PREFIX_LENGTH])
            .first()
        )
        stored = candidate.hashed if candidate else _DUMMY_HASH
        if not hmac.compare_digest(stored, hash_key(secret)) or candidate is None:
            return None
        if not candidate.is_usable(now):
            return None
        return candidate


class ApiKey(models.Model):
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="api_keys")
    user = models.CharField(
        max_length=128, help_text="The person or service this key acts for: the fairness principal."
    )
    name = models.CharField(max_length=128, blank=True)
    prefix = models.CharField(max_length=PREFIX_LENGTH, unique=True, editable=False)
    hashed = models.CharField(max_length=64, editable=False)
    tier_override = models.ForeignKey(
        Tier, on_delete=models.PROTECT, null=True, blank=True, related_name="api_keys"
    )
    app_type = models.CharField(max_length=8, choices=AppType.choices, default=AppType.CHAT)
    allowed_models = models.CharField(
        max_length=1024,
        blank=True,
        help_text="Comma-separated model names or patterns (llama-*); blank: every model.",
    )
    monthly_budget = models.DecimalField(
        max_digits=14,
        decimal_places=4,
        null=True,
        blank=True,
        validators=[MinValueValidator(0)],
        help_text="This key's own spending limit per calendar month (UTC), beside its tenant's; "
        "the tier's over-budget policy applies. Blank: none.",
    )
    expires_at = models.DateTimeField(null=True, blank=True)
    owner = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="owned_api_keys",
        help_text="Who made this key in the tenant's pages: a member manages the keys they own "
        "there (by this, never by the principal's name, which anyone may share).",
    )
    revoked = models.BooleanField(default=False)
    last_used_at = models.DateTimeField(null=True, blank=True, editable=False)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = ApiKeyManager()

    class Meta:
        ordering = ["tenant__name", "user"]
        verbose_name = "API key"

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.tenant.slug}/{self.user})"

    def set_new_secret(self) -> str:
        """Give the key a fresh secret (its prefix and hash, not yet saved) and return the
        secret, which is never stored or shown again."""
        secret = generate_key()
        self.prefix, self.hashed = secret[:PREFIX_LENGTH], hash_key(secret)
        return secret

    @property
    def tier(self) -> Tier:
        return self.tier_override or self.tenant.default_tier

    @property
    def band(self) -> int:
        """The tier's band, lowered (never raised) by the application type."""
        return max(int(self.tier.band), int(APP_TYPE_BAND[AppType(self.app_type)]))

    def is_usable(self, now: datetime | None = None) -> bool:
        now = now or timezone.now()
        if self.revoked or not self.tenant.is_active:
            return False
        return self.expires_at is None or self.expires_at > now

    def model_patterns(self) -> list[str]:
        return [p.strip() for p in self.allowed_models.split(",") if p.strip()]

    def allows_model(self, model: str) -> bool:
        return patterns_allow(self.model_patterns(), model)


def patterns_allow(patterns: Sequence[str], model: str) -> bool:
    """A key's model restriction: no patterns allow every model, else one must match."""
    return not patterns or any(fnmatch.fnmatchcase(model, p) for p in patterns)
