"""The demo's keys and admin login: the stored ones while they still work, else new ones."""

from __future__ import annotations

import secrets

from django.contrib.auth import get_user_model

from tenants.demo.data import DEMO_KEY_NAME, KEYS
from tenants.models import ApiKey, Membership, Role, Tenant, Tier

ADMIN_USERNAME = "admin"


def _still_valid(tenant: Tenant, stored: list[dict[str, str]]) -> bool:
    """Every demo user has a stored key that this database accepts as that user's demo key."""
    by_user = {k.get("user"): k.get("key") for k in stored}
    for user, _app_type, _tier in KEYS:
        secret = by_user.get(user)
        key = ApiKey.objects.for_key(secret) if isinstance(secret, str) else None
        if key is None or key.tenant_id != tenant.pk or key.user != user:
            return False
        if key.name != DEMO_KEY_NAME:
            return False
    return True


def demo_keys(
    tenant: Tenant, tiers: dict[str, Tier], stored: list[dict[str, str]], reset: bool
) -> list[dict[str, str]]:
    """The stored keys if they all still work and no reset was asked for; else new ones (the old
    demo keys are deleted, so a reset really revokes what was handed out)."""
    if not reset and _still_valid(tenant, stored):
        keys = {k.user: k for k in ApiKey.objects.filter(tenant=tenant, name=DEMO_KEY_NAME)}
        return [
            {
                "user": user,
                "app_type": app_type,
                "tier": keys[user].tier.name,
                "key": next(k["key"] for k in stored if k.get("user") == user),
            }
            for user, app_type, _tier in KEYS
        ]
    ApiKey.objects.filter(tenant=tenant, name=DEMO_KEY_NAME).delete()
    out = []
    for user, app_type, tier_name in KEYS:
        key, secret = ApiKey.objects.create_key(
            tenant=tenant,
            user=user,
            name=DEMO_KEY_NAME,
            app_type=app_type,
            tier_override=tiers[tier_name] if tier_name else None,
        )
        out.append({"user": user, "app_type": app_type, "tier": key.tier.name, "key": secret})
    return out


def make_tenant_administrator(tenant: Tenant) -> None:
    """The demo's login also administers the demo tenant, so its pages (/portal/) open at once."""
    user = get_user_model().objects.get(username=ADMIN_USERNAME)
    Membership.objects.update_or_create(user=user, tenant=tenant, defaults={"role": Role.ADMIN})


def demo_admin_password(stored: str | None, reset: bool) -> str:
    """A staff login for the demo: the stored password while it still works, else a fresh
    random one (never a fixed one: the demo may be reachable by others)."""
    user, _ = get_user_model().objects.get_or_create(
        username=ADMIN_USERNAME, defaults={"email": "admin@localhost"}
    )
    if not reset and stored and user.is_staff and user.is_superuser and user.check_password(stored):
        return stored
    password = secrets.token_urlsafe(12)
    user.is_staff = user.is_superuser = True
    user.set_password(password)
    user.save()
    return password
