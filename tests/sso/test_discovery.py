"""The provider's endpoints come from its discovery document, read at the first login; a
provider that cannot be reached gives a page saying so (503), never a server error, and the
gateway starts regardless."""

from __future__ import annotations

import json
import socket
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any

import pytest
from django.test import Client

from tenants.sso.config import SsoConfig
from tenants.sso.discovery import DiscoveryError, discover
from tenants.sso.discovery import provider as endpoints_of
from tests.sso.provider import Provider, sso_config


def test_the_endpoints_are_read_from_the_issuers_document(provider: Provider) -> None:
    found = discover(provider.issuer, timeout=5)
    assert found.issuer == provider.issuer
    assert found.token == f"{provider.issuer}/oauth2/token"
    assert found.jwks == f"{provider.issuer}/jwks"


def test_a_named_endpoint_wins_over_the_discovered_one(provider: Provider) -> None:
    conf = sso_config(provider.issuer, endpoints={"userinfo": "https://elsewhere.example/me"})
    found = endpoints_of(conf)
    assert found.userinfo == "https://elsewhere.example/me"
    assert found.authorization == f"{provider.issuer}/oauth2/authorize"


class _Impostor(BaseHTTPRequestHandler):
    """Serves the discovery document of another issuer."""

    def do_GET(self) -> None:
        body = json.dumps(
            {
                "issuer": "https://idp.example",
                "authorization_endpoint": "x",
                "token_endpoint": "x",
                "userinfo_endpoint": "x",
                "jwks_uri": "x",
            }
        )
        self.send_response(200)
        self.send_header("content-type", "application/json")
        self.end_headers()
        self.wfile.write(body.encode())

    def log_message(self, *args: Any) -> None:
        pass


def test_a_document_for_another_issuer_is_refused() -> None:
    server = HTTPServer(("127.0.0.1", 0), _Impostor)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05})
    thread.start()
    try:
        with pytest.raises(DiscoveryError, match="names the issuer"):
            discover(f"http://127.0.0.1:{server.server_port}", timeout=5)
    finally:
        server.shutdown()
        server.server_close()
        thread.join()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_an_unreachable_provider_gives_a_503_page(sso_on: Any, db: None) -> None:
    conf: SsoConfig = sso_on(sso_config(f"http://127.0.0.1:{free_port()}"))
    response = Client().get("/oidc/authenticate/")
    assert response.status_code == 503
    assert "identity provider cannot be reached" in response.content.decode()
    assert conf.issuer
