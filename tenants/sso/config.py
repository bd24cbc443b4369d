"""Single sign-on's settings, read from the environment by `llmserver/settings.py`.

`sso_from_env()` is None unless `OIDC_RP_CLIENT_ID` is set: then nothing about SSO is installed,
no route, backend or app. Set, it needs the client's secret and either the provider's issuer
(its endpoints are read from `<issuer>/.well-known/openid-configuration` at the first login) or
all four endpoints by name; anything less stops start-up naming the variable.
"""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from llmserver.env import env_choice, env_int, env_list, env_str

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


def _url(name: str) -> str:
    value = env_str(name).strip()
    if value and (urlsplit(value).scheme not in {"http", "https"} or not urlsplit(value).netloc):
        raise ImproperlyConfigured(f"{name} must be an http(s) URL; got {value!r}")
    return value


def sso_from_env() -> SsoConfig | None:
    client_id = env_str("OIDC_RP_CLIENT_ID").strip()
    if not client_id:
        return None
    secret = env_str("OIDC_RP_CLIENT_SECRET")
    if not secret:
        raise ImproperlyConfigured("OIDC_RP_CLIENT_ID is set: OIDC_RP_CLIENT_SECRET is needed too")
    issuer = _url("OIDC_OP_ISSUER")
    endpoints = {key: url for key, name in ENDPOINT_VARIABLES.items() if (url := _url(name))}
    if not issuer and len(endpoints) < len(ENDPOINT_VARIABLES):
        missing = [n for k, n in ENDPOINT_VARIABLES.items() if k not in endpoints]
        raise ImproperlyConfigured(
            "OIDC_RP_CLIENT_ID is set: name the provider by OIDC_OP_ISSUER, or set "
            + ", ".join(missing)
        )
    rules = RoleRules(
        claim=env_str("OIDC_ROLES_CLAIM", RoleRules.claim).strip(),
        operator_groups=frozenset(env_list("OIDC_OPERATOR_GROUPS", ["llmserver:operators"])),
        superuser_groups=frozenset(env_list("OIDC_SUPERUSER_GROUPS", [])),
        tenant_prefix=env_str("OIDC_TENANT_ROLE_PREFIX", RoleRules.tenant_prefix).strip(),
    )
    return SsoConfig(
        client_id=client_id,
        client_secret=secret,
        issuer=issuer,
        endpoints=endpoints,
        sign_algo=env_choice("OIDC_RP_SIGN_ALGO", SIGN_ALGORITHMS, "rs256").upper(),
        scopes=env_str("OIDC_RP_SCOPES", "openid email profile"),
        rules=rules,
        operators_group=env_str("OIDC_OPERATORS_GROUP", "operators (single sign-on)"),
        session_seconds=env_int("OIDC_SESSION_SECONDS", 8 * 3600, minimum=60),
        timeout=float(env_int("OIDC_TIMEOUT", 10, minimum=1)),
    )


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
