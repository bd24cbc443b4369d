"""Single sign-on turned on against a real provider on loopback (`provider.py`), per test.

`sso` sets the settings `OIDC_RP_CLIENT_ID` and friends would give and reloads the URL
configuration, whose /oidc/ routes exist only when single sign-on is on; afterwards it reloads it
off again. Tests that need the provider skip, saying so, where oidc-provider-mock is missing.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import Any

import pytest
from django.urls import clear_url_caches

from tenants.sso.config import SsoConfig, sso_settings
from tests.sso.provider import Provider, running_provider, sso_config


def reload_urls() -> None:
    import llmserver.urls

    importlib.reload(llmserver.urls)
    clear_url_caches()


@pytest.fixture(scope="module")
def provider() -> Iterator[Provider]:
    pytest.importorskip(
        "oidc_provider_mock", reason="oidc-provider-mock is not installed (pip install -e .[dev])"
    )
    with running_provider() as running:
        yield running


@pytest.fixture
def sso_on(settings: Any) -> Iterator[Any]:
    """A function that turns single sign-on on with a configuration; off again after the test."""

    def turn_on(conf: SsoConfig) -> SsoConfig:
        for name, value in sso_settings(conf).items():
            setattr(settings, name, value)
        reload_urls()
        return conf

    yield turn_on
    settings.SSO = None
    reload_urls()


@pytest.fixture
def sso(sso_on: Any, provider: Provider, db: None) -> SsoConfig:
    conf: SsoConfig = sso_on(sso_config(provider.issuer))
    return conf
