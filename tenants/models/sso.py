"""Who a single sign-on login is: the identity provider's issuer and subject (`sub`), and what
the provider's claims granted at the last login.

`sub` is the one claim a provider promises never to reassign; an e-mail or a user name can be
changed, or chosen, by whoever controls the provider account, so matching on it would let that
person sign in as a local account of the same name. A user with no `SsoIdentity` is a local
account (the break-glass operators): single sign-on never signs in as, or changes, one.

`granted_*` say which roles the claims carried last time, so that the next login removes those
the claims no longer carry and leaves alone what an operator granted by hand.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models


class SsoIdentity(models.Model):
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="sso_identity"
    )
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    granted_staff = models.BooleanField(default=False)
    granted_superuser = models.BooleanField(default=False)
    granted_tenants = models.JSONField(
        default=list, help_text="The ids of the tenants the claims made the user a member of."
    )

    class Meta:
        verbose_name = "single sign-on identity"
        verbose_name_plural = "single sign-on identities"
        constraints = [
            models.UniqueConstraint(fields=["issuer", "subject"], name="one_user_per_sso_subject")
        ]

    def __str__(self) -> str:
        return f"{self.user} ({self.subject} at {self.issuer})"
