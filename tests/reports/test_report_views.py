"""The admin report page and its CSV downloads: staff only, the fixed data set's figures."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.reports.operators import operator
from tests.reports.usage_data import at, load, record

RANGE = "start=2025-03-01&end=2025-03-03"


@pytest.fixture
def staff(cast: Any) -> Client:
    load(cast)
    client = Client()
    client.force_login(operator())
    return client


def rows(response: Any) -> list[list[str]]:
    return list(csv.reader(io.StringIO(response.content.decode())))


def test_it_sends_non_staff_to_the_admin_login(cast: Any) -> None:
    client = Client()
    client.force_login(User.objects.create_user("member", password="pw"))
    response = client.get("/admin/reports/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_it_draws_the_three_charts(staff: Client) -> None:
    html = staff.get(f"/admin/reports/?{RANGE}").content.decode()
    assert html.count('<svg class="chart"') == 3
    assert 'aria-label="Cost per day"' in html and "<title>03-02: 0.1000</title>" in html


def test_it_shows_the_range_totals(staff: Client) -> None:
    html = staff.get(f"/admin/reports/?{RANGE}").content.decode()
    assert "<strong>6</strong> requests" in html and "<strong>1</strong> more refused" in html
    assert "cost <strong>0.10600000</strong>" in html


def test_it_exports_the_per_user_table_with_totals(staff: Client) -> None:
    assert rows(staff.get(f"/admin/reports/users.csv?{RANGE}")) == [
        [
            "tenant",
            "user",
            "requests",
            "refused",
            "prompt_tokens",
            "completion_tokens",
            "total_tokens",
            "cost",
        ],
        ["acme", "alice", "3", "1", "6000", "3000", "9000", "0.01200000"],
        ["acme", "bob", "2", "0", "2000", "1000", "3000", "0.00400000"],
        ["globex", "charlie", "1", "0", "10000", "10000", "20000", "0.09000000"],
        ["total", "", "6", "1", "18000", "14000", "32000", "0.10600000"],
    ]


def test_it_exports_the_latency_table(staff: Client) -> None:
    assert rows(staff.get(f"/admin/reports/latency.csv?{RANGE}"))[1:3] == [
        ["interactive", "queue wait", "5", "2.0", "4.0", "4.0"],
        ["interactive", "time to first token", "4", "4.0", "6.0", "6.0"],
    ]


def test_it_limits_every_table_to_one_tenant_on_request(staff: Client) -> None:
    body = rows(staff.get(f"/admin/reports/models.csv?{RANGE}&tenant=globex"))
    assert body[1:] == [
        ["llama", "1", "0", "10000", "10000", "20000", "0.09000000"],
        ["total", "1", "0", "10000", "10000", "20000", "0.09000000"],
    ]


@pytest.mark.parametrize(
    "table",
    ["tenants", "users", "models", "days", "statuses", "endpoints", "errors", "latency", "budgets"],
)
def test_it_offers_csv_for_every_table(staff: Client, table: str) -> None:
    response = staff.get(f"/admin/reports/{table}.csv?{RANGE}")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    assert f"/admin/reports/{table}.csv?" in staff.get(f"/admin/reports/?{RANGE}").content.decode()


def test_it_splits_usage_by_the_api_endpoint(staff: Client, cast: Any) -> None:
    record(
        "e1",
        cast.acme,
        "alice",
        "llama",
        at(3, 2),
        500,
        0,
        api_key=cast.alice,
        endpoint="embeddings",
    )
    body = rows(staff.get(f"/admin/reports/endpoints.csv?{RANGE}"))
    assert [r[:4] for r in body[1:]] == [
        ["chat", "6", "1", "18000"],
        ["embeddings", "1", "0", "500"],
        ["total", "7", "1", "18500"],
    ]


def test_it_answers_404_for_an_unknown_table(staff: Client) -> None:
    assert staff.get("/admin/reports/secrets.csv").status_code == 404
