"""The audit tests' operators and admin form posts."""

from __future__ import annotations

from typing import Any

from django.contrib.auth.models import Permission, User
from django.db import models
from django.forms.models import model_to_dict
from django.test import Client

from tenants.models import AuditEntry


def operator(
    username: str = "root", *, superuser: bool = True, codenames: tuple[str, ...] = ()
) -> User:
    if superuser:
        return User.objects.create_superuser(username, password="pw")
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="tenants", codename__in=codenames)
    )
    return user


def logged_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def form_data(obj: models.Model, **changes: Any) -> dict[str, Any]:
    """What the admin's change form posts for `obj`, with `changes` applied."""
    data = {**model_to_dict(obj), **changes}
    return {name: "" if value is None else value for name, value in data.items()}


def entries(model: str, action: str | None = None) -> list[AuditEntry]:
    found = AuditEntry.objects.filter(model=model).order_by("id")
    return list(found if action is None else found.filter(action=action))
