"""The identity provider's endpoints: named in the environment, or read from its discovery
document (`<issuer>/.well-known/openid-configuration`, OpenID Connect Discovery 1.0).

The document is read at the first login, not at start-up, and kept for the life of the process:
a provider that is down when the gateway starts must not stop the gateway (the OpenAI API does
not need it), only single sign-on, which answers 503 until the provider answers.
"""

from __future__ import annotations

import dataclasses
import logging
import threading
from dataclasses import dataclass

import httpx

from tenants.sso.config import SsoConfig

log = logging.getLogger(__name__)

WELL_KNOWN = "/.well-known/openid-configuration"


class DiscoveryError(Exception):
    """The provider's discovery document could not be read, or does not describe it."""


@dataclass(frozen=True)
class Provider:
    issuer: str  # "" when the endpoints are named and no issuer is: `iss` is then not checked
    authorization: str
    token: str
    userinfo: str
    jwks: str


_discovered: dict[str, Provider] = {}
_lock = threading.Lock()


def provider(conf: SsoConfig) -> Provider:
    """The endpoints in force: the named ones, the rest from the issuer's document."""
    if not conf.issuer:
        return Provider(issuer="", **conf.endpoints)
    with _lock:
        found = _discovered.get(conf.issuer)
        if found is None:
            found = _discovered[conf.issuer] = discover(conf.issuer, conf.timeout)
    return dataclasses.replace(found, **conf.endpoints)


def discover(issuer: str, timeout: float) -> Provider:
    url = issuer.rstrip("/") + WELL_KNOWN
    try:
        response = httpx.get(url, timeout=timeout)
        response.raise_for_status()
        document = response.json()
        found = Provider(
            issuer=str(document["issuer"]),
            authorization=str(document["authorization_endpoint"]),
            token=str(document["token_endpoint"]),
            userinfo=str(document["userinfo_endpoint"]),
            jwks=str(document["jwks_uri"]),
        )
    except (httpx.HTTPError, ValueError, KeyError, TypeError) as exc:
        log.warning("single sign-on: cannot read %s: %s", url, exc)
        raise DiscoveryError(f"the identity provider's {url} could not be read") from exc
    # Discovery 1.0, section 4.3: the document must name the issuer it was fetched for.
    if found.issuer.rstrip("/") != issuer.rstrip("/"):
        raise DiscoveryError(f"{url} names the issuer {found.issuer!r}, not {issuer!r}")
    return found
