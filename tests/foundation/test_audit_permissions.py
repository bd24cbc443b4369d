"""Who may change the configuration is audited too: group permissions, a user's groups and
permissions, and the staff and superuser flags."""

from __future__ import annotations

from django.contrib.auth.models import Group, Permission, User

from tenants.models import ActorKind
from tests.foundation.audit_helpers import entries, logged_in, operator


def _permission(codename: str) -> Permission:
    return Permission.objects.get(content_type__app_label="tenants", codename=codename)


def test_a_group_permission_change_in_the_admin_is_recorded(db: None) -> None:
    group = Group.objects.create(name="auditors")
    group.permissions.add(_permission("view_usage_report"))
    client = logged_in(operator("root"))
    response = client.post(
        f"/admin/auth/group/{group.pk}/change/",
        {
            "name": "auditors",
            "permissions": [_permission("view_usage_report").pk, _permission("view_auditentry").pk],
        },
        REMOTE_ADDR="192.0.2.8",
    )
    assert response.status_code == 302
    entry = entries("auth.group", "update")[-1]
    assert (entry.actor_kind, entry.actor, entry.address) == (ActorKind.USER, "root", "192.0.2.8")
    assert entry.changes == {
        "permissions": [
            ["tenants.view_usage_report"],
            ["tenants.view_auditentry", "tenants.view_usage_report"],
        ]
    }


def test_adding_a_user_to_a_group_from_either_side_is_recorded(db: None) -> None:
    group = Group.objects.create(name="operators")
    user = User.objects.create_user("dora")
    user.groups.add(group)
    group.user_set.remove(user)
    added = entries("auth.user", "update")[-1]
    removed = entries("auth.group", "update")[-1]
    assert added.changes == {"groups": [[], ["operators"]]}
    assert removed.changes == {"user_set": [["dora"], []]}
    assert added.actor_kind == ActorKind.SYSTEM


def test_a_direct_user_permission_is_recorded(db: None) -> None:
    user = User.objects.create_user("dora")
    user.user_permissions.add(_permission("view_auditentry"))
    [entry] = entries("auth.user", "update")
    assert entry.changes == {"user_permissions": [[], ["tenants.view_auditentry"]]}


def test_making_a_user_staff_and_superuser_is_recorded_without_the_password(db: None) -> None:
    user = User.objects.create_user("dora", password="old-password")
    created = entries("auth.user", "create")[-1]
    assert created.changes["password"] == [None, "[redacted]"]
    user.is_staff = user.is_superuser = True
    user.set_password("new-password")
    user.save()
    [entry] = entries("auth.user", "update")
    assert entry.changes == {
        "password": ["[redacted]", "[redacted]"],
        "is_staff": [False, True],
        "is_superuser": [False, True],
    }


def test_a_login_is_not_a_change(db: None) -> None:
    operator("root")
    from django.test import Client

    assert Client().login(username="root", password="pw")
    assert entries("auth.user", "update") == []
