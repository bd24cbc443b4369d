"""The roles claim, read without a provider: which values make staff, superusers and tenant
roles, and which are someone else's groups."""

from __future__ import annotations

import logging

import pytest

from tenants.models import Role
from tenants.sso.claims import Roles, roles_from_claims
from tenants.sso.config import RoleRules

RULES = RoleRules(
    claim="roles",
    operator_groups=frozenset({"platform-team"}),
    superuser_groups=frozenset({"platform-root"}),
    tenant_prefix="llm",
)


def test_each_kind_of_value() -> None:
    claims = {"roles": ["platform-team", "llm:acme:admin", "llm:big-co:member", "sales"]}
    assert roles_from_claims(claims, RULES) == Roles(
        staff=True, superuser=False, tenants={"acme": Role.ADMIN, "big-co": Role.MEMBER}
    )


def test_a_superuser_group_is_staff_too_and_only_it_makes_a_superuser() -> None:
    assert roles_from_claims({"roles": ["platform-root"]}, RULES) == Roles(True, True, {})
    assert not roles_from_claims({"roles": ["platform-team"]}, RULES).superuser


def test_one_string_counts_as_one_value_and_other_claims_are_not_read() -> None:
    assert roles_from_claims({"roles": "llm:acme:member"}, RULES).tenants == {"acme": Role.MEMBER}
    assert roles_from_claims({"groups": ["platform-team"]}, RULES) == Roles()
    assert roles_from_claims({"roles": [7, None, {"x": 1}]}, RULES) == Roles()


def test_a_value_with_the_prefix_but_no_role_is_logged(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="tenants.sso.claims"):
        roles = roles_from_claims({"roles": ["llm:acme:owner", "llm:acme", "llm:"]}, RULES)
    assert roles == Roles()
    assert "'llm:acme:owner' names no tenant role" in caplog.text


def test_a_prefix_with_colons_of_its_own_names_tenant_roles() -> None:
    rules = RoleRules(tenant_prefix="corp:llm")
    claims = {"groups": ["corp:llm:acme:admin", "corp:other:acme:admin", "corp:llm"]}
    assert roles_from_claims(claims, rules) == Roles(False, False, {"acme": Role.ADMIN})
