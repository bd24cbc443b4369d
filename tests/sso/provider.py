"""A real OpenID Connect provider for the single sign-on tests, and a person's way through it.

The provider is oidc-provider-mock (authlib's server under Flask), served by werkzeug on
127.0.0.1 on a free port in a thread. It signs RS256 ID tokens, publishes its discovery document
and JWKS, and has an authorize form where the person types a `sub`; the claims of each `sub` are
set beforehand with `PUT /users/<sub>`. `login` walks the authorization code flow: the gateway's
start page (Django's test client), the provider's form (httpx), and the callback (test client).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx
from django.http import HttpResponse
from django.test import Client

from tenants.sso.config import RoleRules, SsoConfig

CLIENT_ID = "llm-server"


@dataclass(frozen=True)
class Provider:
    issuer: str

    def set_claims(self, sub: str, **claims: Any) -> None:
        response = httpx.put(f"{self.issuer}/users/{sub}", json=claims)
        assert response.status_code == 204, response.text

    def authorize(self, authorize_url: str, sub: str) -> str:
        """Submit the provider's form as `sub`: the callback address it sends the browser to."""
        assert authorize_url.startswith(self.issuer), authorize_url
        assert httpx.get(authorize_url).status_code == 200
        response = httpx.post(authorize_url, data={"sub": sub})
        assert response.status_code == 302, response.text
        return response.headers["location"]


def sso_config(issuer: str, **changes: Any) -> SsoConfig:
    """The gateway's single sign-on configuration for the provider at `issuer`."""
    values: dict[str, Any] = {
        "client_id": CLIENT_ID,
        "client_secret": "not-a-secret",
        "issuer": issuer,
        "endpoints": {},
        "sign_algo": "RS256",
        "scopes": "openid email profile",
        "rules": RoleRules(superuser_groups=frozenset({"llmserver:superusers"})),
        "operators_group": "operators (single sign-on)",
        "session_seconds": 3600,
        "timeout": 5.0,
    }
    return SsoConfig(**{**values, **changes})


@contextmanager
def running_provider() -> Iterator[Provider]:
    import oidc_provider_mock
    import werkzeug.serving

    server = werkzeug.serving.make_server("127.0.0.1", 0, oidc_provider_mock.app(), threaded=True)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        yield Provider(issuer=f"http://127.0.0.1:{server.server_port}")
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def callback_path(location: str) -> str:
    """The callback's path and query, as the test client takes them."""
    parts = urlsplit(location)
    assert parts.path == "/oidc/callback/", location
    return f"{parts.path}?{parts.query}"


def start(client: Client, next_url: str | None = None) -> str:
    """Open the gateway's single sign-on start page: the provider's authorize address."""
    query = {"next": next_url} if next_url else {}
    response = client.get("/oidc/authenticate/", query)
    assert response.status_code == 302, response
    return str(response["Location"])


def login(
    client: Client, provider: Provider, sub: str, next_url: str | None = None, **claims: Any
) -> HttpResponse:
    """A whole login as `sub` with `claims`: the gateway's answer to the provider's callback."""
    provider.set_claims(sub, **claims)
    location = provider.authorize(start(client, next_url), sub)
    response: HttpResponse = client.get(callback_path(location), REMOTE_ADDR="198.51.100.7")
    return response
