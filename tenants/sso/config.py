"""Single sign-on's settings: the configuration `llmserver/settings.py` reads from the
environment (`llmserver.env.sso_from_env`) into `settings.SSO`, and what it adds to Django's.

`settings.SSO` is None unless `OIDC_RP_CLIENT_ID` is set: then nothing about SSO is installed,
no route, backend or app. Set, the provider is named by its issuer (its endpoints are read from
`<issuer>/.well-known/openid-configuration` at the first login) or by all four endpoints.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

SIGN_ALGORITHMS = ("rs256", "rs384", "rs512", "es256", "es384", "es512", "hs256")

# mozilla-django-oidc's names for the endpoints, which the operator may set instead of an issuer.
ENDPOINT_VARIABLES = {
    "authorization": "OIDC_OP_AUTHORIZATION_ENDPOINT",
    "token": "OIDC_OP_TOKEN_ENDPOINT",
    "userinfo": "OIDC_OP_USER_ENDPOINT",
    "jwks": "OIDC_OP_JWKS_ENDPOINT",
}


@dataclass(frozen=True)
class RoleRules:
    """How the roles claim names roles: `operator_groups` make staff, `superuser_groups`
    superusers, and `<tenant_prefix>:<tenant-slug>:admin|member` a tenant's member."""

    claim: str = "groups"
    operator_groups: frozenset[str] = frozenset({"llmserver:operators"})
    superuser_groups: frozenset[str] = frozenset()
    tenant_prefix: str = "llmserver"


@dataclass(frozen=True)
class SsoConfig:
    client_id: str
    client_secret: str
    issuer: str  # "" when every endpoint is named
    endpoints: dict[str, str]  # named ones, by ENDPOINT_VARIABLES key; the rest discovered
    sign_algo: str
    scopes: str
    rules: RoleRules
    operators_group: str  # the Django group SSO operators join; the admin sets its permissions
    session_seconds: int
    timeout: float


def current() -> SsoConfig:
    """The configuration in force; only single sign-on's own routes and backend ask for it."""
    conf: SsoConfig | None = settings.SSO
    if conf is None:
        raise ImproperlyConfigured("single sign-on is off: OIDC_RP_CLIENT_ID is not set")
    return conf


def sso_settings(conf: SsoConfig) -> dict[str, object]:
    """The Django settings single sign-on adds when it is on: its configuration, the backend
    after the password one (local accounts stay the break-glass), and mozilla-django-oidc's own
    settings by their names."""
    return {
        "SSO": conf,
        "AUTHENTICATION_BACKENDS": [
            "django.contrib.auth.backends.ModelBackend",
            "tenants.sso.backend.SsoBackend",
        ],
        "OIDC_RP_CLIENT_ID": conf.client_id,
        "OIDC_RP_CLIENT_SECRET": conf.client_secret,
        "OIDC_RP_SIGN_ALGO": conf.sign_algo,
        "OIDC_RP_SCOPES": conf.scopes,
        # PKCE on top of the client secret: a stolen code is useless without the verifier.
        "OIDC_USE_PKCE": True,
        # The library's default is to wait for the provider forever, holding a worker thread.
        "OIDC_TIMEOUT": conf.timeout,
    }
