"""Who belongs to a tenant, and as what: the tenant's own administrators and members.

A membership gives a person the tenant's pages (`tenants/portal/`): an administrator manages the
tenant's members and API keys within what its tier allows; a member sees the tenant's usage and
manages only the keys that act for them. Neither is operator staff: the Django admin stays the
operators'. A person may belong to several tenants, each with its own role.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models

from tenants.models.tenants import Tenant


class Role(models.TextChoices):
    ADMIN = "admin", "tenant administrator"
    MEMBER = "member", "tenant member"


class MembershipQuerySet(models.QuerySet["Membership"]):
    def of(self, user_id: int, slug: str) -> MembershipQuerySet:
        """The person's membership of the active tenant `slug` (none: no such tenant to them)."""
        return self.filter(user_id=user_id, tenant__slug=slug, tenant__is_active=True)


class Membership(models.Model):
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="memberships"
    )
    tenant = models.ForeignKey(Tenant, on_delete=models.CASCADE, related_name="memberships")
    role = models.CharField(max_length=6, choices=Role.choices, default=Role.MEMBER)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = MembershipQuerySet.as_manager()

    class Meta:
        ordering = ["tenant__name", "user__username"]
        constraints = [
            models.UniqueConstraint(fields=["user", "tenant"], name="one_membership_per_tenant")
        ]

    def __str__(self) -> str:
        return f"{self.user} in {self.tenant.slug} ({self.role})"

    @property
    def is_admin(self) -> bool:
        return self.role == Role.ADMIN
