"""Someone the provider knows but whose claims give no role here gets no access: a page that
says so (403), no session, and no user row."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.test import Client

from tenants.sso.config import SsoConfig
from tests.sso.provider import Provider, login


def test_no_role_claim_gets_a_refusal_page_and_no_access(
    sso: SsoConfig, provider: Provider
) -> None:
    client = Client()
    response = login(client, provider, "nobody", email="nobody@example.com")
    assert (response.status_code, response["Location"]) == (302, "/oidc/refused/")
    page = client.get("/oidc/refused/")
    assert page.status_code == 403
    assert "has no role in LLM-Server" in page.content.decode()
    assert "_auth_user_id" not in client.session
    assert client.get("/admin/").status_code == 302
    assert not User.objects.exists()


def test_a_disabled_account_is_refused_even_with_roles(sso: SsoConfig, provider: Provider) -> None:
    login(Client(), provider, "gone", groups=["llmserver:operators"])
    User.objects.filter(sso_identity__subject="gone").update(is_active=False)
    client = Client()
    response = login(client, provider, "gone", groups=["llmserver:operators"])
    assert response["Location"] == "/oidc/refused/"
    assert "is disabled" in client.get("/oidc/refused/").content.decode()
    assert "_auth_user_id" not in client.session
