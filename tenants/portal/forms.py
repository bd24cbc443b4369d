"""The portal's forms, each checked against what the tenant's operator granted: a key never
gets more budget than its tenant, never a tier (the tier is the operator's), never a past expiry."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any

from django import forms
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.utils import timezone

from tenants.models import ApiKey, Membership, Role, Tenant

MODEL_PATTERN = re.compile(r"^[A-Za-z0-9._:/@*?\[\]-]+$")


class KeyForm(forms.ModelForm[ApiKey]):
    """A key's settings as its tenant may set them. `user`, the fairness principal, is the
    member's own name unless an administrator names another person or service. A member may
    rename a key of theirs but not loosen it: its budget, models, expiry and use may have been
    set by an administrator."""

    class Meta:
        model = ApiKey
        fields = ["name", "user", "app_type", "allowed_models", "monthly_budget", "expires_at"]
        widgets = {"expires_at": forms.DateTimeInput(attrs={"type": "datetime-local"})}
        labels = {"user": "Acts for", "app_type": "Used from"}

    def __init__(self, *args: Any, membership: Membership, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.tenant = tenant = membership.tenant
        if not membership.is_admin:
            self.fields["user"].disabled = True
            self.fields["user"].initial = membership.user.get_username()
            self.fields["user"].help_text = "Your own keys act for you."
            if self.instance.pk is not None:  # the rest is left as it is, not even re-saved
                for name in [n for n in self.fields if n != "name"]:
                    del self.fields[name]
        if tenant.monthly_budget is not None:
            self.fields[
                "monthly_budget"
            ].help_text = (
                f"At most the tenant's budget, {tenant.monthly_budget}. Blank: the tenant's only."
            )

    def clean_monthly_budget(self) -> Decimal | None:
        budget: Decimal | None = self.cleaned_data.get("monthly_budget")
        ceiling = self.tenant.monthly_budget
        if budget is not None and ceiling is not None and budget > ceiling:
            raise forms.ValidationError(f"A key's budget cannot exceed the tenant's ({ceiling}).")
        return budget

    def clean_expires_at(self) -> Any:
        expires = self.cleaned_data.get("expires_at")
        if expires is not None and expires <= timezone.now():
            raise forms.ValidationError("The expiry must be in the future.")
        return expires

    def clean_allowed_models(self) -> str:
        patterns = [p.strip() for p in self.cleaned_data.get("allowed_models", "").split(",")]
        bad = [p for p in patterns if p and not MODEL_PATTERN.match(p)]
        if bad:
            raise forms.ValidationError(f"Not a model name or pattern: {', '.join(bad)}")
        return ", ".join(p for p in patterns if p)


class MemberForm(forms.Form):
    """Add a person who already has an account here (made by an operator, or at their first
    single sign-on) by user name or e-mail address."""

    person = forms.CharField(label="User name or e-mail", max_length=254)
    role = forms.ChoiceField(choices=Role.choices, initial=Role.MEMBER)

    def __init__(self, *args: Any, tenant: Tenant, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.tenant = tenant

    def clean_person(self) -> AbstractBaseUser:
        text = self.cleaned_data["person"].strip()
        users = get_user_model().objects.filter(is_active=True)
        found = list(users.filter(username=text)) or list(users.filter(email__iexact=text)[:2])
        if len(found) != 1:
            raise forms.ValidationError(
                "No single account has that name or address; the person signs in once first, "
                "or an operator creates the account."
            )
        if Membership.objects.filter(tenant=self.tenant, user=found[0]).exists():
            raise forms.ValidationError("That person is already a member.")
        user: AbstractBaseUser = found[0]
        return user


class RoleForm(forms.Form):
    role = forms.ChoiceField(choices=Role.choices)
