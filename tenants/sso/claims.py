"""The roles a login's claims grant: pure, no database.

The roles claim (`RoleRules.claim`, `groups` by default) is a list of strings, or one string.
A value in `operator_groups` makes operator staff, one in `superuser_groups` a superuser (and
staff), and `<prefix>:<tenant-slug>:admin` or `:member` a tenant's administrator or member; an
administrator value wins over a member value for the same tenant. Other values are the
provider's own groups and are ignored; a value with the prefix but an unknown role is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tenants.models.members import Role
from tenants.sso.config import RoleRules

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Roles:
    staff: bool = False
    superuser: bool = False
    tenants: dict[str, Role] = field(default_factory=dict)  # by tenant slug


def claim_values(claims: Mapping[str, Any], name: str) -> list[str]:
    value = claims.get(name)
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, str)]
    return []


def roles_from_claims(claims: Mapping[str, Any], rules: RoleRules) -> Roles:
    values = claim_values(claims, rules.claim)
    superuser = any(v in rules.superuser_groups for v in values)
    staff = superuser or any(v in rules.operator_groups for v in values)
    tenants: dict[str, Role] = {}
    for value in values:
        if value in rules.operator_groups or value in rules.superuser_groups:
            continue
        start = rules.tenant_prefix + ":"
        rest = value[len(start) :] if value.startswith(start) else ""
        if not rest:
            continue
        slug, _, role_name = rest.rpartition(":")
        if not slug or role_name not in Role.values:
            log.warning("single sign-on: %r names no tenant role (<slug>:admin|member)", value)
            continue
        role = Role(role_name)
        if tenants.get(slug) != Role.ADMIN:
            tenants[slug] = role
    return Roles(staff=staff, superuser=superuser, tenants=tenants)
