"""The authentication backend of single sign-on: mozilla-django-oidc's code flow, with the
person found by the provider's issuer and `sub` and their roles taken from the claims
(`grants.sign_in`) instead of the library's match on e-mail, which would let whoever controls
a provider account with a local account's address sign in as that account.

Beyond the library it checks that the ID token is for this client and from the discovered
issuer, and that the userinfo speaks of the same `sub`; it turns the provider's refusals and
failures into a refusal page (`views.refused`) instead of a server error.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
import jwt
from django.contrib import messages
from django.contrib.auth import get_user_model
from django.contrib.auth.models import User
from django.core.exceptions import SuspiciousOperation
from django.http import HttpRequest
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from tenants.sso.config import current
from tenants.sso.discovery import DiscoveryError, provider
from tenants.sso.grants import sign_in

log = logging.getLogger(__name__)

UNCONFIRMED = "The identity provider did not confirm the sign-in. Try again."


def refuse(request: HttpRequest, text: str) -> None:
    """Say why on the refusal page the callback sends the browser to."""
    messages.error(request, text, fail_silently=True)


class SsoBackend(OIDCAuthenticationBackend):  # type: ignore[misc]  # the library is untyped
    def __init__(self) -> None:
        # Not the library's __init__, which reads the endpoints: Django builds this backend on
        # every request of a signed-in SSO user, to load them, and that must not wait on the
        # provider. The endpoints are set in `authenticate`.
        self.UserModel = get_user_model()
        self.conf = current()
        self.OIDC_RP_CLIENT_ID = self.conf.client_id
        self.OIDC_RP_CLIENT_SECRET = self.conf.client_secret
        self.OIDC_RP_SIGN_ALGO = self.conf.sign_algo
        self.OIDC_RP_IDP_SIGN_KEY = None
        self.issuer = ""  # the discovered one, which the ID token's `iss` must be

    def authenticate(self, request: HttpRequest | None, **kwargs: Any) -> User | None:
        # Only the callback view passes a nonce: a password login never reaches the provider.
        if request is None or "nonce" not in kwargs:
            return None
        try:
            endpoints = provider(self.conf)
            self.issuer = endpoints.issuer
            self.OIDC_OP_TOKEN_ENDPOINT = endpoints.token
            self.OIDC_OP_USER_ENDPOINT = endpoints.userinfo
            self.OIDC_OP_JWKS_ENDPOINT = endpoints.jwks
            user: User | None = super().authenticate(request, **kwargs)
            return user
        # requests' errors are OSErrors: the provider refused the code (a forged or replayed
        # one) or could not be reached. jwt's: a token that is expired, or not yet valid.
        except (DiscoveryError, OSError, httpx.HTTPError, jwt.PyJWTError) as exc:
            log.warning("single sign-on: login refused: %s", exc)
            refuse(request, UNCONFIRMED)
            return None

    def retrieve_matching_jwk(self, token: str) -> jwt.PyJWK:
        """The provider's key for the token. JOSE makes the header's `kid` optional, and the
        library requires it: a token without one is checked with the provider's only key for
        its algorithm (a provider with several must name the key)."""
        header = jwt.get_unverified_header(token)
        if "kid" in header:
            key: jwt.PyJWK = super().retrieve_matching_jwk(token)
            return key
        response = httpx.get(self.OIDC_OP_JWKS_ENDPOINT, timeout=self.conf.timeout)
        response.raise_for_status()
        keys = [
            k
            for k in response.json().get("keys", [])
            if k.get("alg", header.get("alg")) == header.get("alg") and k.get("use", "sig") == "sig"
        ]
        if len(keys) != 1:
            raise SuspiciousOperation("the ID token names no key and the provider has several")
        return jwt.PyJWK(keys[0])

    def verify_token(self, token: str, **kwargs: Any) -> dict[str, Any]:
        payload: dict[str, Any] = super().verify_token(token, **kwargs)
        audience = payload.get("aud")
        audiences = [audience] if isinstance(audience, str) else list(audience or [])
        if self.conf.client_id not in audiences:
            raise SuspiciousOperation("the ID token is not for this client")
        if self.issuer and payload.get("iss") != self.issuer:
            raise SuspiciousOperation("the ID token is not from the configured issuer")
        return payload

    def get_userinfo(
        self, access_token: str, id_token: str, payload: dict[str, Any]
    ) -> dict[str, Any]:
        """The ID token's claims with the userinfo's over them: some providers put the groups
        in one, some in the other. OIDC Core 5.3.2: the userinfo must be about the same `sub`."""
        userinfo: dict[str, Any] = super().get_userinfo(access_token, id_token, payload)
        if userinfo.get("sub") != payload.get("sub"):
            raise SuspiciousOperation("the userinfo is not about the ID token's subject")
        return {**payload, **userinfo}

    def get_or_create_user(
        self, access_token: str, id_token: str, payload: dict[str, Any]
    ) -> User | None:
        claims = self.get_userinfo(access_token, id_token, payload)
        issuer, subject = str(payload.get("iss") or ""), str(payload.get("sub") or "")
        if not (issuer and subject):
            raise SuspiciousOperation("the ID token names no issuer or subject")
        login = sign_in(self.conf, issuer, subject, claims)
        if login.user is None:
            log.info("single sign-on: %s at %s refused: %s", subject, issuer, login.refusal)
            refuse(self.request, login.refusal)
        return login.user
