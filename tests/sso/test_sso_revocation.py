"""Roles the claims no longer carry are taken away at the next login; what an operator granted
by hand stays; a person left with no role is refused."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import User
from django.test import Client

from tenants.models import Membership, Role
from tenants.sso.config import SsoConfig
from tests.sso.provider import Provider, login


def test_claims_removed_at_the_provider_are_revoked_at_the_next_login(
    sso: SsoConfig, provider: Provider, cast: Any
) -> None:
    login(
        Client(),
        provider,
        "rv-1",
        groups=["llmserver:operators", "llmserver:superusers", "llmserver:acme:admin"],
    )
    user = User.objects.get(sso_identity__subject="rv-1")
    assert (user.is_staff, user.is_superuser) == (True, True)
    # An operator adds this person to globex by hand: single sign-on did not grant it.
    Membership.objects.create(user=user, tenant=cast.globex, role=Role.MEMBER)

    client = Client()
    response = login(client, provider, "rv-1", groups=["llmserver:acme:member"])
    assert response["Location"] == "/portal/"
    user.refresh_from_db()
    assert (user.is_staff, user.is_superuser) == (False, False)
    assert not user.groups.exists()
    memberships = {m.tenant.slug: m.role for m in Membership.objects.filter(user=user)}
    assert memberships == {"acme": Role.MEMBER, "globex": Role.MEMBER}
    assert client.get("/admin/").status_code == 302


def test_a_person_whose_roles_are_all_gone_is_refused_and_keeps_none(
    sso: SsoConfig, provider: Provider, cast: Any
) -> None:
    login(Client(), provider, "rv-2", groups=["llmserver:acme:admin"])
    client = Client()
    response = login(client, provider, "rv-2", groups=["engineering"])
    assert response["Location"] == "/oidc/refused/"
    assert "_auth_user_id" not in client.session
    assert not Membership.objects.filter(user__sso_identity__subject="rv-2").exists()
