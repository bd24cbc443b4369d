"""Staff users for the report and dashboard tests: with the named permissions those pages need,
or, for the tests that they are refused, without."""

from __future__ import annotations

from django.contrib.auth.models import Permission, User

READERS = ("view_usage_report", "view_queue_dashboard")


def operator(username: str = "op", codenames: tuple[str, ...] = READERS) -> User:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="tenants", codename__in=codenames)
    )
    return user
