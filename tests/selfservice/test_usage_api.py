"""GET /api/v1/usage and /api/v1/usage.csv: the key's own tenant, hand-computed figures."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from django.test import Client

from tenants.models import ApiKey
from tests.reports.usage_data import at, load, record

RANGE = {"start": "2025-03-01", "end": "2025-03-03"}


@pytest.fixture
def data(cast: Any) -> Any:
    load(cast)
    return cast


def get(key: str, path: str, **params: str) -> Any:
    return Client().get(path, params, HTTP_AUTHORIZATION=f"Bearer {key}")


def test_it_groups_the_tenants_usage_by_day(data: Any) -> None:
    response = get(data.alice_key, "/api/v1/usage", **RANGE)
    assert response.status_code == 200
    body = response.json()
    assert body["tenant"] == "acme"
    assert [(r["day"], r["requests"], r["cost"]) for r in body["data"]] == [
        ("2025-03-01", 2, "0.00600000"),
        ("2025-03-02", 2, "0.01000000"),
        ("2025-03-03", 1, "0.00000000"),
    ]
    assert (body["totals"]["requests"], body["totals"]["cost"]) == (5, "0.01600000")


def test_it_counts_a_refused_request_as_refused_not_among_the_requests(data: Any) -> None:
    body = get(data.alice_key, "/api/v1/usage", group_by="user", user="alice", **RANGE).json()
    assert [(r["user"], r["requests"], r["refused"]) for r in body["data"]] == [("alice", 3, 1)]
    assert (body["totals"]["requests"], body["totals"]["refused"]) == (3, 1)


def test_it_groups_by_model(data: Any) -> None:
    body = get(data.bob_key, "/api/v1/usage", group_by="model", **RANGE).json()
    assert [(r["model"], r["total_tokens"], r["cost"]) for r in body["data"]] == [
        ("llama", 6000, "0.01200000"),
        ("mistral", 6000, "0.00400000"),
    ]


def test_it_groups_by_endpoint(data: Any) -> None:
    # e1 at the `*` price (0.5 in, 1 out per million), e2 at llama's from 03-02 (3/6).
    record(
        "e1",
        data.acme,
        "bob",
        "mistral",
        at(3, 2, 10),
        2000,
        0,
        api_key=data.bob,
        endpoint="embeddings",
    )
    record(
        "e2",
        data.acme,
        "alice",
        "llama",
        at(3, 3, 10),
        1000,
        1000,
        api_key=data.alice,
        endpoint="responses",
    )
    body = get(data.alice_key, "/api/v1/usage", group_by="endpoint", **RANGE).json()
    rows = [
        (r["endpoint"], r["requests"], r["refused"], r["total_tokens"], r["cost"])
        for r in body["data"]
    ]
    assert rows == [
        ("chat", 5, 1, 12000, "0.01600000"),
        ("embeddings", 1, 0, 2000, "0.00100000"),
        ("responses", 1, 0, 2000, "0.00900000"),
    ]
    assert (body["group_by"], body["totals"]["requests"]) == ("endpoint", 7)


def test_it_filters_by_user_and_model(data: Any) -> None:
    body = get(
        data.alice_key, "/api/v1/usage", group_by="user", user="bob", model="llama", **RANGE
    ).json()
    assert [(r["user"], r["requests"], r["prompt_tokens"]) for r in body["data"]] == [
        ("bob", 2, 2000)
    ]


def test_it_shows_charlie_nothing_of_acme(data: Any) -> None:
    body = get(data.charlie_key, "/api/v1/usage", group_by="user", **RANGE).json()
    assert [r["user"] for r in body["data"]] == ["charlie"]
    assert body["totals"]["cost"] == "0.09000000"
    nothing = get(data.charlie_key, "/api/v1/usage", user="alice", **RANGE).json()
    assert (nothing["data"], nothing["totals"]["requests"]) == ([], 0)


def test_it_exports_csv_with_a_totals_line(data: Any) -> None:
    response = get(data.alice_key, "/api/v1/usage.csv", group_by="model", **RANGE)
    assert response["Content-Type"].startswith("text/csv")
    assert "usage-acme-2025-03-01-2025-03-03-by-model.csv" in response["Content-Disposition"]
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows == [
        [
            "model",
            "requests",
            "refused",
            "prompt_tokens",
            "completion_tokens",
            "total_tokens",
            "cost",
        ],
        ["llama", "4", "1", "4000", "2000", "6000", "0.01200000"],
        ["mistral", "1", "0", "4000", "2000", "6000", "0.00400000"],
        ["total", "5", "1", "8000", "4000", "12000", "0.01600000"],
    ]


def test_it_keeps_charlies_csv_to_globex(data: Any) -> None:
    response = get(data.charlie_key, "/api/v1/usage.csv", group_by="user", **RANGE)
    text = response.content.decode()
    assert "charlie" in text and "alice" not in text and "bob" not in text


def test_it_refuses_a_missing_key_in_openai_shape(data: Any) -> None:
    response = Client().get("/api/v1/usage")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "missing_api_key"
    assert set(response.json()["error"]) == {"message", "type", "param", "code"}


def test_it_refuses_a_revoked_key(data: Any) -> None:
    ApiKey.objects.filter(pk=data.alice.pk).update(revoked=True)
    response = get(data.alice_key, "/api/v1/usage")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "invalid_api_key"


def test_it_names_the_bad_parameter(data: Any) -> None:
    response = get(data.alice_key, "/api/v1/usage", start="2025-03-05", end="2025-03-01")
    assert response.status_code == 400
    error = response.json()["error"]
    assert (error["type"], error["param"]) == ("invalid_request_error", "start")


def test_it_rejects_an_unknown_grouping(data: Any) -> None:
    response = get(data.alice_key, "/api/v1/usage", group_by="tenant")
    assert (response.status_code, response.json()["error"]["param"]) == (400, "group_by")
