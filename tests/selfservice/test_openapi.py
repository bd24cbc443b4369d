"""The self-service API publishes an OpenAPI document describing its three operations."""

from __future__ import annotations

from django.test import Client


def test_it_describes_the_usage_and_quota_endpoints(db: None) -> None:
    doc = Client().get("/api/v1/openapi.json").json()
    assert doc["openapi"].startswith("3.")
    assert {"/api/v1/usage", "/api/v1/usage.csv", "/api/v1/quota"} <= set(doc["paths"])
    params = {p["name"] for p in doc["paths"]["/api/v1/usage"]["get"]["parameters"]}
    assert params == {"start", "end", "model", "user", "group_by"}


def test_it_describes_the_usage_report_as_one_object(db: None) -> None:
    doc = Client().get("/api/v1/openapi.json").json()
    ok = doc["paths"]["/api/v1/usage"]["get"]["responses"]["200"]["content"]
    assert ok["application/json"]["schema"] == {"$ref": "#/components/schemas/UsageReport"}
    assert "totals" in doc["components"]["schemas"]["UsageReport"]["properties"]


def test_it_documents_the_bearer_key_and_the_error_answers(db: None) -> None:
    doc = Client().get("/api/v1/openapi.json").json()
    scheme = doc["components"]["securitySchemes"]["apiKey"]
    assert (scheme["type"], scheme["scheme"]) == ("http", "bearer")
    for path in ("/api/v1/usage", "/api/v1/usage.csv", "/api/v1/quota"):
        operation = doc["paths"][path]["get"]
        assert operation["security"] == [{"apiKey": []}]
        for status in ("400", "401"):
            error = operation["responses"][status]["content"]["application/json"]["schema"]
            assert error == {"$ref": "#/components/schemas/Error"}
    assert "error" in doc["components"]["schemas"]["Error"]["properties"]
