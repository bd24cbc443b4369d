"""Who a change is recorded against outside the admin: the management command by name, the
self-service API key, or the system."""

from __future__ import annotations

from io import StringIO
from typing import Any

from django.core.management import call_command
from django.test import RequestFactory
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tenants.api.auth import api_key_of
from tenants.audit_actor import audit_context
from tenants.models import ActorKind, AuditEntry, Tier
from tests.foundation.audit_helpers import entries


def test_a_management_commands_change_names_the_command(cast: Any) -> None:
    call_command("create_tenant", "initech", "Initech", "--tier", "batch", stdout=StringIO())
    [entry] = [e for e in entries("tenants.tenant", "create") if e.object_repr == "Initech"]
    assert (entry.actor_kind, entry.actor, entry.address) == (
        ActorKind.COMMAND,
        "manage.py create_tenant",
        None,
    )
    assert entry.changes["default_tier"] == [None, f"batch (batch) (#{cast.batch.pk})"]


def test_a_change_after_the_command_ended_is_the_systems_again(cast: Any) -> None:
    call_command("create_tenant", "initech", "--tier", "batch", stdout=StringIO())
    Tier.objects.create(name="gold")
    assert entries("tenants.tier", "create")[-1].actor == "system"


class _RenameKey(APIView):
    """A self-service write, as one would be made: DRF authenticates the key, the view saves."""

    def post(self, request: Request) -> Response:
        key = api_key_of(request)
        key.name = "renamed by its owner"
        key.save()
        return Response({})


def test_a_self_service_change_names_the_api_key(cast: Any) -> None:
    request = RequestFactory().post(
        "/api/v1/x", HTTP_AUTHORIZATION=f"Bearer {cast.alice_key}", REMOTE_ADDR="198.51.100.4"
    )
    assert audit_context(_RenameKey.as_view())(request).status_code == 200
    entry = AuditEntry.objects.filter(model="tenants.apikey", action="update").get()
    assert (entry.actor_kind, entry.actor, entry.address) == (
        ActorKind.API_KEY,
        f"key {cast.alice}",
        "198.51.100.4",
    )
    assert cast.alice_key not in entry.actor
