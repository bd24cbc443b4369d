"""A deletion is recorded with the values the object had (secrets redacted), and so is each
object the deletion took with it."""

from __future__ import annotations

from typing import Any

from tenants.audit import REDACTED
from tenants.models import AuditEntry, Backend, ModelRoute
from tests.foundation.audit_helpers import entries, logged_in, operator


def test_a_deletion_in_the_admin_records_what_the_object_was(db: None) -> None:
    backend = Backend.objects.create(
        name="gpu1", base_url="http://10.0.0.5:8000", api_key="upstream-secret"
    )
    route = ModelRoute.objects.create(public_name="llama", backend=backend)
    client = logged_in(operator("root"))
    response = client.post(
        f"/admin/tenants/backend/{backend.pk}/delete/", {"post": "yes"}, REMOTE_ADDR="192.0.2.7"
    )
    assert response.status_code == 302
    [gone] = entries("tenants.backend", "delete")
    assert (gone.actor, gone.address, gone.object_repr) == ("root", "192.0.2.7", str(backend))
    assert gone.changes["base_url"] == ["http://10.0.0.5:8000", None]
    assert gone.changes["api_key"] == [REDACTED, None]
    [cascaded] = entries("tenants.modelroute", "delete")
    assert (cascaded.object_id, cascaded.actor) == (str(route.pk), "root")
    assert "upstream-secret" not in str(list(AuditEntry.objects.values_list("changes", flat=True)))


def test_a_deleted_tenants_entries_outlive_it(cast: Any) -> None:
    from tenants.models import Tenant

    tenant = Tenant.objects.create(name="Initech", slug="initech", default_tier=cast.batch)
    tenant_id = tenant.pk
    tenant.delete()
    assert [e.action for e in AuditEntry.objects.filter(tenant_id=tenant_id).order_by("id")] == [
        "create",
        "delete",
    ]
