"""Single sign-on's variables: off without a client id; on, a secret and either an issuer or
every endpoint are needed, and a bad value stops start-up naming the variable."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from llmserver.env import sso_from_env
from tenants.sso.config import RoleRules, sso_settings


@pytest.fixture
def env(monkeypatch: Any) -> Any:
    for name in ("OIDC_RP_CLIENT_ID", "OIDC_RP_CLIENT_SECRET", "OIDC_OP_ISSUER"):
        monkeypatch.delenv(name, raising=False)
    return monkeypatch


def test_an_issuer_is_enough_and_the_defaults_are_documented(env: Any) -> None:
    env.setenv("OIDC_RP_CLIENT_ID", "llm-server")
    env.setenv("OIDC_RP_CLIENT_SECRET", "s")
    env.setenv("OIDC_OP_ISSUER", "https://idp.example.com/realms/main")
    conf = sso_from_env()
    assert conf is not None
    assert (conf.issuer, conf.endpoints, conf.sign_algo) == (
        "https://idp.example.com/realms/main",
        {},
        "RS256",
    )
    assert conf.rules == RoleRules(
        claim="groups",
        operator_groups=frozenset({"llmserver:operators"}),
        superuser_groups=frozenset(),
        tenant_prefix="llmserver",
    )
    added = sso_settings(conf)
    assert added["AUTHENTICATION_BACKENDS"][0] == "django.contrib.auth.backends.ModelBackend"
    assert "MIDDLEWARE" not in added  # nothing on the way of any request


def test_the_roles_are_configurable(env: Any) -> None:
    env.setenv("OIDC_RP_CLIENT_ID", "llm-server")
    env.setenv("OIDC_RP_CLIENT_SECRET", "s")
    env.setenv("OIDC_OP_ISSUER", "https://login.example.com/t/v2.0")
    env.setenv("OIDC_ROLES_CLAIM", "roles")
    env.setenv("OIDC_OPERATOR_GROUPS", "ops, sre")
    env.setenv("OIDC_SUPERUSER_GROUPS", "root")
    env.setenv("OIDC_TENANT_ROLE_PREFIX", "gw")
    conf = sso_from_env()
    assert conf is not None
    assert conf.rules == RoleRules("roles", frozenset({"ops", "sre"}), frozenset({"root"}), "gw")


def test_a_client_id_without_a_secret_stops_start_up(env: Any) -> None:
    env.setenv("OIDC_RP_CLIENT_ID", "llm-server")
    env.setenv("OIDC_OP_ISSUER", "https://idp.example.com")
    with pytest.raises(ImproperlyConfigured, match="OIDC_RP_CLIENT_SECRET"):
        sso_from_env()


def test_without_an_issuer_every_endpoint_is_needed(env: Any) -> None:
    env.setenv("OIDC_RP_CLIENT_ID", "llm-server")
    env.setenv("OIDC_RP_CLIENT_SECRET", "s")
    env.setenv("OIDC_OP_TOKEN_ENDPOINT", "https://idp.example.com/token")
    with pytest.raises(ImproperlyConfigured, match="OIDC_OP_AUTHORIZATION_ENDPOINT"):
        sso_from_env()


@pytest.mark.parametrize(
    ("name", "value"),
    [("OIDC_OP_ISSUER", "idp.example.com"), ("OIDC_RP_SIGN_ALGO", "none")],
)
def test_a_bad_value_names_its_variable(env: Any, name: str, value: str) -> None:
    env.setenv("OIDC_RP_CLIENT_ID", "llm-server")
    env.setenv("OIDC_RP_CLIENT_SECRET", "s")
    env.setenv("OIDC_OP_ISSUER", "https://idp.example.com")
    env.setenv(name, value)
    with pytest.raises(ImproperlyConfigured, match=name):
        sso_from_env()
