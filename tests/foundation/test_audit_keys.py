"""A key created or revoked is recorded, its secret never: not the key, not its hash."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

from django.contrib.messages import get_messages
from django.core.management import call_command

from tenants.audit import REDACTED
from tenants.models import ActorKind, ApiKey, AuditEntry
from tests.foundation.audit_helpers import entries, logged_in, operator


def _everything_recorded() -> str:
    return json.dumps(list(AuditEntry.objects.values()), default=str)


def test_a_key_created_in_the_admin_is_recorded_without_its_secret(cast: Any) -> None:
    client = logged_in(operator("root"))
    response = client.post(
        "/admin/tenants/apikey/add/",
        {"tenant": cast.globex.pk, "user": "dave", "app_type": "api"},
        follow=True,
    )
    [message] = [m for m in map(str, get_messages(response.wsgi_request)) if "new key" in m]
    secret = message.split("The new key is ")[1].split(" ")[0]
    key = ApiKey.objects.get(user="dave")
    [entry] = AuditEntry.objects.filter(model="tenants.apikey", object_id=str(key.pk))
    assert entry.action == "create"
    assert (entry.actor_kind, entry.actor, entry.tenant_id) == ("user", "root", cast.globex.pk)
    assert entry.changes["hashed"] == [None, REDACTED]
    assert entry.changes["prefix"] == [None, key.prefix]
    assert entry.changes["user"] == [None, "dave"]
    recorded = _everything_recorded()
    assert secret not in recorded and key.hashed not in recorded


def test_a_key_revoked_in_the_admin_is_recorded(cast: Any) -> None:
    client = logged_in(operator("root"))
    response = client.post(
        "/admin/tenants/apikey/",
        {"action": "revoke", "_selected_action": [cast.alice.pk, cast.charlie.pk]},
    )
    assert response.status_code == 302
    revoked = {e.object_id: e for e in entries("tenants.apikey", "update")}
    assert set(revoked) == {str(cast.alice.pk), str(cast.charlie.pk)}
    assert revoked[str(cast.alice.pk)].changes == {"revoked": [False, True]}
    assert revoked[str(cast.charlie.pk)].tenant_id == cast.globex.pk


def test_a_key_created_by_the_command_is_recorded_without_its_secret(cast: Any) -> None:
    out = StringIO()
    call_command("create_api_key", "acme", "erin", "--json", stdout=out)
    secret = json.loads(out.getvalue())["key"]
    [entry] = [e for e in entries("tenants.apikey", "create") if e.changes["user"][1] == "erin"]
    assert (entry.actor_kind, entry.actor) == (ActorKind.COMMAND, "manage.py create_api_key")
    assert secret not in _everything_recorded()


def test_the_keys_use_is_not_a_change(cast: Any) -> None:
    from django.utils import timezone

    key = ApiKey.objects.get(pk=cast.alice.pk)
    key.last_used_at = timezone.now()
    key.save(update_fields=["last_used_at"])
    key.save()
    assert entries("tenants.apikey", "update") == []
