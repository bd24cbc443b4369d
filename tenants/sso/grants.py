"""A single sign-on login in the database: find the person by the provider's `sub`, create them
on their first login, and make their staff flag, operators group and tenant memberships what
the claims say (`claims.py`), in one transaction.

What the claims granted last time is kept on `SsoIdentity`: a role the claims no longer carry is
removed, one an operator granted by hand is left alone. A person with no role after that is
refused, and a first login with no role creates no user. Writes happen only where something
changed, so a login that changes nothing leaves nothing in the audit trail; what it does change
is recorded as made by "single sign-on (<issuer>)" from the client's address
(`tenants.audit_actor.acting_as`): no one is signed in yet while it runs.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from django.contrib.auth.models import Group, User
from django.db import transaction

from tenants.audit_actor import acting_as
from tenants.models import Membership, Role, SsoIdentity, Tenant
from tenants.sso.claims import Roles, roles_from_claims
from tenants.sso.config import SsoConfig

log = logging.getLogger(__name__)

NO_ROLE = (
    "Your single sign-on account has no role in LLM-Server: ask your administrator to add you "
    "to an operator group or to a tenant's group."
)
DISABLED = "This account is disabled: ask an operator of LLM-Server."


@dataclass(frozen=True)
class Login:
    user: User | None
    refusal: str = ""


def sign_in(conf: SsoConfig, issuer: str, subject: str, claims: Mapping[str, Any]) -> Login:
    roles = roles_from_claims(claims, conf.rules)
    with transaction.atomic(), acting_as(f"single sign-on ({issuer})"):
        tenants = _known_tenants(roles)
        identity = (
            SsoIdentity.objects.select_for_update()
            .select_related("user")
            .filter(issuer=issuer, subject=subject)
            .first()
        )
        if identity is None:
            if not (roles.staff or tenants):
                return Login(None, NO_ROLE)
            user = User(username=_free_username(claims))
            user.set_unusable_password()  # signs in by the provider only
            _set_flags(user, roles, granted=None)
            _set_profile(user, claims)
            user.save()
            identity = SsoIdentity.objects.create(user=user, issuer=issuer, subject=subject)
        else:
            user = identity.user
            changed = _set_flags(user, roles, granted=identity) + _set_profile(user, claims)
            if changed:
                user.save(update_fields=changed)
        _set_operators_group(user, roles.staff, identity, conf.operators_group)
        _set_memberships(user, tenants, identity)
        granted = (roles.staff, roles.superuser, sorted(t.pk for t in tenants))
        if granted != (
            identity.granted_staff,
            identity.granted_superuser,
            identity.granted_tenants,
        ):
            identity.granted_staff, identity.granted_superuser, identity.granted_tenants = granted
            identity.save(update_fields=["granted_staff", "granted_superuser", "granted_tenants"])
        if not user.is_active:
            return Login(None, DISABLED)
        if not (user.is_staff or Membership.objects.filter(user=user).exists()):
            return Login(None, NO_ROLE)
    return Login(user)


def _known_tenants(roles: Roles) -> dict[Tenant, Role]:
    found = {t.slug: t for t in Tenant.objects.filter(slug__in=list(roles.tenants))}
    for slug in roles.tenants.keys() - found.keys():
        log.warning("single sign-on: the claims name tenant %r, which does not exist", slug)
    return {found[slug]: role for slug, role in roles.tenants.items() if slug in found}


def _free_username(claims: Mapping[str, Any]) -> str:
    """The provider's user name (or e-mail) where no account has it yet, else with a number:
    a local account's name is never taken over, only resembled."""
    wanted = str(claims.get("preferred_username") or claims.get("email") or "sso-user")
    base = re.sub(r"[^\w.@+-]", "-", wanted)[:140] or "sso-user"
    name, n = base, 1
    while User.objects.filter(username__iexact=name).exists():
        n += 1
        name = f"{base}-{n}"
    return name


def _set_flags(user: User, roles: Roles, granted: SsoIdentity | None) -> list[str]:
    """Staff and superuser as the claims say, except that a flag the claims never granted
    (`granted` is None on the first login) is not taken away."""
    changed = []
    had_staff = granted is not None and granted.granted_staff
    had_superuser = granted is not None and granted.granted_superuser
    if user.is_staff != roles.staff and (roles.staff or had_staff):
        user.is_staff = roles.staff
        changed.append("is_staff")
    if user.is_superuser != roles.superuser and (roles.superuser or had_superuser):
        user.is_superuser = roles.superuser
        changed.append("is_superuser")
    return changed


def _set_profile(user: User, claims: Mapping[str, Any]) -> list[str]:
    """E-mail and names as the provider has them now: shown, never used to match anyone."""
    changed = []
    # Each field, its claim, and the field's length in django.contrib.auth's User.
    for field, claim, length in (
        ("email", "email", 254),
        ("first_name", "given_name", 150),
        ("last_name", "family_name", 150),
    ):
        value = str(claims.get(claim) or "")[:length]
        if value and getattr(user, field) != value:
            setattr(user, field, value)
            changed.append(field)
    return changed


def _set_operators_group(user: User, staff: bool, granted: SsoIdentity, name: str) -> None:
    """Operators join one Django group, whose permissions an operator sets in the admin."""
    if staff:
        group, _ = Group.objects.get_or_create(name=name)
        if not user.groups.filter(pk=group.pk).exists():
            user.groups.add(group)
    elif granted.granted_staff:
        group_ids = list(user.groups.filter(name=name).values_list("pk", flat=True))
        if group_ids:
            user.groups.remove(*group_ids)


def _set_memberships(user: User, tenants: dict[Tenant, Role], granted: SsoIdentity) -> None:
    current = {m.tenant_id: m for m in Membership.objects.filter(user=user)}
    for tenant, role in tenants.items():
        membership = current.get(tenant.pk)
        if membership is None:
            Membership.objects.create(user=user, tenant=tenant, role=role)
        elif membership.role != role:
            membership.role = role
            membership.save(update_fields=["role"])
    wanted = {t.pk for t in tenants}
    for tenant_id in set(granted.granted_tenants) - wanted:
        if tenant_id in current:
            current[tenant_id].delete()
