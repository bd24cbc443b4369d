"""GET /api/v1/audit: changes to the key's own tenant, keys, quota rules and prices, never
another tenant's."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from django.test import Client

from tenants.models import AuditEntry, CostRule, QuotaRule, Tier


def get(key: str, query: str = "") -> Any:
    return Client().get(f"/api/v1/audit{query}", HTTP_AUTHORIZATION=f"Bearer {key}")


def test_the_audit_list_shows_only_the_keys_tenant(cast: Any) -> None:
    QuotaRule.objects.create(tenant=cast.acme, limit=10)
    QuotaRule.objects.create(tenant=cast.globex, limit=20)
    CostRule.objects.create(
        model="*",
        tenant=cast.globex,
        input_per_million=1,
        output_per_million=2,
        effective_from=datetime(2026, 1, 1, tzinfo=UTC),
    )
    Tier.objects.create(name="gold")  # everyone's tier: no tenant's own object
    response = get(cast.alice_key)
    assert response.status_code == 200
    body = response.json()
    assert body["tenant"] == "acme"
    seen = {(row["model"], row["object_id"]) for row in body["data"]}
    assert seen == {
        ("tenants.tenant", str(cast.acme.pk)),
        ("tenants.apikey", str(cast.alice.pk)),
        ("tenants.apikey", str(cast.bob.pk)),
        ("tenants.quotarule", str(QuotaRule.objects.get(tenant=cast.acme).pk)),
    }
    theirs = AuditEntry.objects.filter(tenant_id=cast.globex.pk).values_list("id", flat=True)
    assert len(theirs) == 4 and not {row["id"] for row in body["data"]} & set(theirs)
    assert {row["id"] for row in get(cast.charlie_key).json()["data"]} == set(theirs)


def test_it_pages_back_from_the_newest(cast: Any) -> None:
    first = get(cast.alice_key, "?limit=2").json()
    assert len(first["data"]) == 2
    rest = get(cast.alice_key, f"?limit=2&before={first['next_before']}").json()
    assert rest["next_before"] is None
    ids = [row["id"] for row in first["data"] + rest["data"]]
    assert ids == sorted(ids, reverse=True) and len(ids) == 3


def test_it_filters_by_model(cast: Any) -> None:
    rows = get(cast.alice_key, "?model=tenants.tenant").json()["data"]
    assert [(r["model"], r["action"]) for r in rows] == [("tenants.tenant", "create")]


def test_an_operator_is_named_only_as_such_and_the_address_is_not_shown(cast: Any) -> None:
    from tests.foundation.audit_helpers import form_data, logged_in, operator

    client = logged_in(operator("root"))
    client.post(
        f"/admin/tenants/apikey/{cast.bob.pk}/change/",
        form_data(cast.bob, name="build bot"),
        REMOTE_ADDR="192.0.2.10",
    )
    [row] = [r for r in get(cast.alice_key).json()["data"] if r["action"] == "update"]
    assert (row["actor_kind"], row["actor"]) == ("user", "operator")
    assert row["changes"] == {"name": ["", "build bot"]}
    assert "address" not in row and "192.0.2.10" not in str(row)


def test_a_bad_limit_is_refused_in_openais_shape(cast: Any) -> None:
    response = get(cast.alice_key, "?limit=0")
    assert response.status_code == 400
    assert response.json()["error"]["param"] == "limit"


def test_it_needs_a_key(db: None) -> None:
    assert Client().get("/api/v1/audit").status_code == 401


def test_the_openapi_document_describes_it(db: None) -> None:
    doc = Client().get("/api/v1/openapi.json").json()
    operation = doc["paths"]["/api/v1/audit"]["get"]
    assert {p["name"] for p in operation["parameters"]} == {"model", "before", "limit"}
    assert operation["security"] == [{"apiKey": []}]
