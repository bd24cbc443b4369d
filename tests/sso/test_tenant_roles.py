"""Tenant role claims (`llmserver:<slug>:admin|member`) become memberships; the person lands on
the tenant pages; an unknown tenant is ignored and logged."""

from __future__ import annotations

import logging
from typing import Any

import pytest
from django.test import Client

from tenants.models import Membership, Role
from tenants.sso.config import SsoConfig
from tests.sso.provider import Provider, login


def roles_of(sub: str) -> dict[str, str]:
    rows = Membership.objects.filter(user__sso_identity__subject=sub)
    return {m.tenant.slug: m.role for m in rows.select_related("tenant")}


def test_a_tenant_admin_claim_makes_the_tenants_administrator(
    sso: SsoConfig, provider: Provider, cast: Any
) -> None:
    response = login(Client(), provider, "ta-1", groups=["llmserver:acme:admin"])
    assert (response.status_code, response["Location"]) == (302, "/portal/")
    assert roles_of("ta-1") == {"acme": Role.ADMIN}


def test_a_member_claim_makes_a_member_who_is_not_staff(
    sso: SsoConfig, provider: Provider, cast: Any
) -> None:
    client = Client()
    response = login(client, provider, "tm-1", groups=["llmserver:globex:member"])
    assert response["Location"] == "/portal/"
    assert roles_of("tm-1") == {"globex": Role.MEMBER}
    # Signed in, but the admin is the operators': it asks for a staff login.
    assert client.get("/admin/").status_code == 302
    assert client.session.get_expiry_age() <= sso.session_seconds


def test_admin_wins_over_member_and_other_groups_are_ignored(
    sso: SsoConfig, provider: Provider, cast: Any
) -> None:
    groups = [
        "llmserver:acme:member",
        "llmserver:acme:admin",
        "engineering",
        "llmserver:globex:member",
    ]
    login(Client(), provider, "ta-2", groups=groups)
    assert roles_of("ta-2") == {"acme": Role.ADMIN, "globex": Role.MEMBER}


def test_an_unknown_tenant_is_ignored_and_logged(
    sso: SsoConfig, provider: Provider, cast: Any, caplog: pytest.LogCaptureFixture
) -> None:
    with caplog.at_level(logging.WARNING, logger="tenants.sso"):
        login(
            Client(), provider, "tm-2", groups=["llmserver:initech:admin", "llmserver:acme:member"]
        )
    assert roles_of("tm-2") == {"acme": Role.MEMBER}
    assert "'initech', which does not exist" in caplog.text


def test_a_page_asked_for_is_where_the_login_lands(
    sso: SsoConfig, provider: Provider, cast: Any
) -> None:
    response = login(Client(), provider, "tm-3", "/portal/keys/", groups=["llmserver:acme:member"])
    assert response["Location"] == "/portal/keys/"
    # ... unless it is the operators' admin, which a tenant member is not shown.
    response = login(
        Client(), provider, "tm-3", "/admin/tenants/", groups=["llmserver:acme:member"]
    )
    assert response["Location"] == "/portal/"
