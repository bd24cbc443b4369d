"""The shared cast: alice (owner) and bob (member) of acme, charlie of globex, who must see nothing."""

from __future__ import annotations

import glob
import os
from dataclasses import dataclass

import pytest

os.environ.setdefault("SECRET_KEY", "test-secret-key-not-for-production")


def pytest_sessionfinish(session: pytest.Session) -> None:
    """Django deletes a SQLite test database's file but not its WAL files, which the gateway's
    worker threads, still connected, keep."""
    from django.conf import settings

    name = settings.DATABASES["default"].get("TEST", {}).get("NAME")
    if name and str(settings.DATABASES["default"]["ENGINE"]).endswith("sqlite3"):
        for path in glob.glob(f"{name}-*"):
            os.remove(path)


@dataclass
class Cast:
    interactive: object
    batch: object
    acme: object
    globex: object
    alice: object
    alice_key: str
    bob: object
    bob_key: str
    charlie: object
    charlie_key: str


@pytest.fixture
def cast(db: None) -> Cast:
    from tenants.models import ApiKey, AppType, Band, Tenant, Tier

    interactive = Tier.objects.create(name="interactive", band=Band.INTERACTIVE, gate_max_waiting=3)
    batch = Tier.objects.create(name="batch", band=Band.BATCH, gate_max_waiting=0)
    acme = Tenant.objects.create(name="Acme", slug="acme", default_tier=interactive)
    globex = Tenant.objects.create(name="Globex", slug="globex", default_tier=interactive)
    alice, alice_key = ApiKey.objects.create_key(tenant=acme, user="alice", app_type=AppType.CHAT)
    bob, bob_key = ApiKey.objects.create_key(tenant=acme, user="bob", app_type=AppType.CHAT)
    charlie, charlie_key = ApiKey.objects.create_key(
        tenant=globex, user="charlie", app_type=AppType.CHAT
    )
    return Cast(
        interactive, batch, acme, globex, alice, alice_key, bob, bob_key, charlie, charlie_key
    )
