"""With no OIDC_RP_CLIENT_ID nothing of single sign-on is there: no /oidc/ route, no backend,
no link on the login pages."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.template.loader import render_to_string
from django.test import Client

from llmserver.env import sso_from_env


def test_single_sign_on_is_off_without_a_client_id(monkeypatch: Any) -> None:
    monkeypatch.delenv("OIDC_RP_CLIENT_ID", raising=False)
    assert sso_from_env() is None
    assert settings.SSO is None
    assert not any("sso" in backend for backend in settings.AUTHENTICATION_BACKENDS)


def test_off_there_is_no_oidc_route_and_no_link(db: None) -> None:
    client = Client()
    assert client.get("/oidc/authenticate/").status_code == 404
    assert client.get("/oidc/callback/?code=x&state=y").status_code == 404
    page = client.get("/admin/login/").content.decode()
    assert "single sign-on" not in page and "/oidc/" not in page
    assert render_to_string("sso/login_button.html", {"next": "/portal/"}).strip() == ""


def test_on_the_portals_login_button_links_to_the_provider(sso: Any) -> None:
    html = render_to_string("sso/login_button.html", {"next": "/portal/"})
    assert 'href="/oidc/authenticate/?next=/portal/"' in html
    assert "Sign in with single sign-on" in html
