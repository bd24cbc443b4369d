"""What a single sign-on login writes is in the audit trail as made by "single sign-on
(<issuer>)" from the client's address; a login that changes nothing writes nothing there."""

from __future__ import annotations

from typing import Any

from django.test import Client

from tenants.models import ActorKind, AuditEntry
from tenants.sso.config import SsoConfig
from tests.sso.provider import Provider, login


def test_a_first_login_is_recorded_as_single_sign_ons_and_a_repeat_records_nothing(
    sso: SsoConfig, provider: Provider, cast: Any
) -> None:
    AuditEntry.objects.all().delete()
    claims = {
        "preferred_username": "ada",
        "groups": ["llmserver:operators", "llmserver:acme:admin"],
    }
    login(Client(), provider, "au-1", **claims)
    entries = list(AuditEntry.objects.order_by("id"))
    assert [(e.model, e.action) for e in entries] == [
        ("auth.user", "create"),
        ("auth.group", "create"),  # the operators' group, on the first operator's login
        ("auth.user", "update"),  # joined the operators' group
        ("tenants.membership", "create"),
    ]
    assert {(e.actor_kind, e.actor, e.address) for e in entries} == {
        (ActorKind.SYSTEM, f"single sign-on ({provider.issuer})", "198.51.100.7")
    }
    user_created = entries[0].changes
    assert user_created["username"] == [None, "ada"]
    assert user_created["password"] == [None, "[redacted]"]
    assert "last_login" not in user_created

    login(Client(), provider, "au-1", **claims)
    assert AuditEntry.objects.count() == len(entries)

    login(Client(), provider, "au-1", preferred_username="ada", groups=["llmserver:acme:member"])
    changes = [
        (e.model, e.action, e.changes) for e in AuditEntry.objects.order_by("id")[len(entries) :]
    ]
    assert changes == [
        ("auth.user", "update", {"is_staff": [True, False]}),
        ("auth.user", "update", {"groups": [["operators (single sign-on)"], []]}),
        ("tenants.membership", "update", {"role": ["admin", "member"]}),
    ]
