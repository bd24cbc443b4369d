"""A callback the gateway did not start, a code the provider did not issue, a code used twice,
or a provider's refusal signs no one in, and never answers 500."""

from __future__ import annotations

from urllib.parse import parse_qs, urlencode, urlsplit

from django.test import Client

from tenants.sso.config import SsoConfig
from tests.sso.provider import Provider, callback_path, start


def test_a_forged_state_is_refused(sso: SsoConfig, provider: Provider) -> None:
    client = Client()
    provider.set_claims("fg-1", groups=["llmserver:operators"])
    location = provider.authorize(start(client), "fg-1")
    query = parse_qs(urlsplit(location).query)
    forged = urlencode({"code": query["code"][0], "state": "not-the-state-we-sent"})
    assert client.get(f"/oidc/callback/?{forged}").status_code == 400
    assert "_auth_user_id" not in client.session


def test_a_state_from_another_browser_is_refused(sso: SsoConfig, provider: Provider) -> None:
    provider.set_claims("fg-2", groups=["llmserver:operators"])
    location = provider.authorize(start(Client()), "fg-2")
    victim = Client()
    response = victim.get(callback_path(location))
    assert (response.status_code, response["Location"]) == (302, "/oidc/refused/")
    assert "_auth_user_id" not in victim.session


def test_a_forged_code_is_refused(sso: SsoConfig, provider: Provider) -> None:
    client = Client()
    provider.set_claims("fg-3", groups=["llmserver:operators"])
    location = provider.authorize(start(client), "fg-3")
    state = parse_qs(urlsplit(location).query)["state"][0]
    response = client.get("/oidc/callback/?" + urlencode({"code": "forged", "state": state}))
    assert (response.status_code, response["Location"]) == (302, "/oidc/refused/")
    assert "did not confirm the sign-in" in client.get("/oidc/refused/").content.decode()
    assert "_auth_user_id" not in client.session


def test_a_callback_or_a_code_used_twice_is_refused(sso: SsoConfig, provider: Provider) -> None:
    client = Client()
    provider.set_claims("fg-4", groups=["llmserver:operators"])
    callback = callback_path(provider.authorize(start(client), "fg-4"))
    assert client.get(callback)["Location"] == "/admin/"
    client.logout()
    # The state was spent by the first use...
    assert client.get(callback)["Location"] == "/oidc/refused/"
    # ... and the code too: under a fresh state the provider refuses it.
    state = parse_qs(urlsplit(start(client)).query)["state"][0]
    code = parse_qs(urlsplit(callback).query)["code"][0]
    response = client.get("/oidc/callback/?" + urlencode({"code": code, "state": state}))
    assert response["Location"] == "/oidc/refused/"
    assert "_auth_user_id" not in client.session


def test_the_providers_refusal_is_said(sso: SsoConfig, provider: Provider) -> None:
    client = Client()
    state = parse_qs(urlsplit(start(client)).query)["state"][0]
    response = client.get(
        "/oidc/callback/?" + urlencode({"error": "access_denied", "state": state})
    )
    assert response["Location"] == "/oidc/refused/"
    assert "did not sign you in (access_denied)" in client.get("/oidc/refused/").content.decode()
