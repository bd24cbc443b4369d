"""The audit trail in the admin is append-only: listed and read with `tenants.view_auditentry`,
never added, changed or deleted, even by a superuser."""

from __future__ import annotations

from typing import Any

from tenants.models import AuditEntry
from tests.foundation.audit_helpers import logged_in, operator


def test_the_audit_admin_has_no_add_change_or_delete(cast: Any) -> None:
    client = logged_in(operator("root"))
    entry = AuditEntry.objects.first()
    assert entry is not None
    listing = client.get("/admin/tenants/auditentry/")
    assert listing.status_code == 200
    assert b"/admin/tenants/auditentry/add/" not in listing.content
    assert b"delete_selected" not in listing.content
    assert client.get("/admin/tenants/auditentry/add/").status_code == 403
    page = client.get(f"/admin/tenants/auditentry/{entry.pk}/change/")
    assert page.status_code == 200 and b'name="_save"' not in page.content
    assert client.post(f"/admin/tenants/auditentry/{entry.pk}/change/", {}).status_code == 403
    assert (
        client.post(f"/admin/tenants/auditentry/{entry.pk}/delete/", {"post": "yes"}).status_code
        == 403
    )
    assert AuditEntry.objects.filter(pk=entry.pk).exists()


def test_the_model_has_only_the_view_permission_to_grant(db: None) -> None:
    from django.contrib.auth.models import Permission

    codenames = Permission.objects.filter(content_type__model="auditentry").values_list(
        "codename", flat=True
    )
    assert list(codenames) == ["view_auditentry"]


def test_staff_without_the_named_permission_are_refused(cast: Any) -> None:
    client = logged_in(operator("staff", superuser=False))
    assert client.get("/admin/tenants/auditentry/").status_code == 403


def test_staff_with_the_named_permission_can_filter_and_search(cast: Any) -> None:
    client = logged_in(operator("auditor", superuser=False, codenames=("view_auditentry",)))
    by_model = client.get("/admin/tenants/auditentry/?model=tenants.tier")
    assert by_model.status_code == 200
    assert b"batch (batch)" in by_model.content and b"Acme" not in by_model.content
    assert client.get("/admin/tenants/auditentry/?actor=system&q=globex").status_code == 200
    assert client.get("/admin/tenants/auditentry/?at__gte=2026-01-01").status_code == 200
