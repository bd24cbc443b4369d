"""An operator's change in the admin is recorded: who, when, from where, and each changed field
before and after."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from tenants.models import ActorKind, AuditEntry
from tests.foundation.audit_helpers import entries, form_data, logged_in, operator


def test_an_admin_change_of_a_tier_records_who_when_where_and_before_after(cast: Any) -> None:
    client = logged_in(operator("root"))
    AuditEntry.objects.all().delete()
    before = timezone.now()
    response = client.post(
        f"/admin/tenants/tier/{cast.batch.pk}/change/",
        form_data(cast.batch, weight=3.0, rpm_per_key=60),
        REMOTE_ADDR="192.0.2.10",
    )
    assert response.status_code == 302
    [entry] = entries("tenants.tier")
    assert (entry.actor_kind, entry.actor, entry.address) == (ActorKind.USER, "root", "192.0.2.10")
    assert before <= entry.at <= timezone.now() + timedelta(seconds=1)
    assert (entry.action, entry.object_id, entry.object_repr) == (
        "update",
        str(cast.batch.pk),
        "batch (batch)",
    )
    assert entry.changes == {"weight": [1.0, 3.0], "rpm_per_key": [None, 60]}


def test_a_relation_is_recorded_by_name_and_id(cast: Any) -> None:
    from tenants.models import ApiKey

    client = logged_in(operator("root"))
    key = ApiKey.objects.get(pk=cast.bob.pk)
    response = client.post(
        f"/admin/tenants/apikey/{key.pk}/change/", form_data(key, tier_override=cast.batch.pk)
    )
    assert response.status_code == 302
    [entry] = entries("tenants.apikey", "update")
    assert entry.changes == {"tier_override": [None, f"batch (batch) (#{cast.batch.pk})"]}
    assert entry.tenant_id == cast.acme.pk


def test_a_save_that_changes_nothing_records_nothing(cast: Any) -> None:
    client = logged_in(operator("root"))
    AuditEntry.objects.all().delete()
    response = client.post(f"/admin/tenants/tier/{cast.batch.pk}/change/", form_data(cast.batch))
    assert response.status_code == 302
    assert entries("tenants.tier") == []
