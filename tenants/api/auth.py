"""`Authorization: Bearer sk-llms-...` authentication for the self-service API.

The request's user is a small principal wrapping the key, so views always scope by
`request.auth.tenant` and can never reach another tenant's rows.
"""

from __future__ import annotations

from dataclasses import dataclass

from rest_framework import exceptions
from rest_framework.authentication import BaseAuthentication, get_authorization_header
from rest_framework.request import Request

from tenants.models import ApiKey


@dataclass(frozen=True)
class KeyPrincipal:
    """What DRF sees as `request.user`: the key's tenant and user, always authenticated."""

    api_key: ApiKey

    is_authenticated = True
    is_anonymous = False

    def __str__(self) -> str:
        return f"{self.api_key.tenant.slug}/{self.api_key.user}"


class ApiKeyAuthentication(BaseAuthentication):
    def authenticate(self, request: Request) -> tuple[KeyPrincipal, ApiKey] | None:
        header = get_authorization_header(request).decode("latin-1").split()
        if not header or header[0].lower() != "bearer":
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed("Malformed Authorization header.")
        key = ApiKey.objects.for_key(header[1])
        if key is None:
            raise exceptions.AuthenticationFailed("Incorrect, revoked or expired API key.")
        return KeyPrincipal(key), key

    def authenticate_header(self, request: Request) -> str:
        return "Bearer"


def api_key_of(request: Request) -> ApiKey:
    """The key that authenticated `request` (every view requires one)."""
    key = request.auth
    if not isinstance(key, ApiKey):
        raise exceptions.NotAuthenticated()
    return key
