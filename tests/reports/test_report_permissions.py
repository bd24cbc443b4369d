"""Being staff is not enough to read every tenant's usage: the reports, their CSV downloads and
the live queue dashboard each need their named permission."""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from tests.reports.operators import operator

PAGES = ["/admin/reports/", "/admin/reports/users.csv", "/admin/dashboard/"]


@pytest.mark.parametrize("page", PAGES)
def test_staff_without_the_permission_are_refused(db: Any, page: str) -> None:
    client = Client()
    client.force_login(operator("editor", codenames=()))
    assert client.get(page).status_code == 403


def test_the_report_permission_does_not_open_the_dashboard(db: Any) -> None:
    client = Client()
    client.force_login(operator("accountant", codenames=("view_usage_report",)))
    assert client.get("/admin/reports/").status_code == 200
    assert client.get("/admin/dashboard/").status_code == 403


def test_a_superuser_reads_everything(db: Any) -> None:
    client = Client()
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    assert all(client.get(page).status_code == 200 for page in PAGES)
