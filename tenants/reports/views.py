"""The admin's report page and its CSV downloads (staff only).

The URLconf wraps these in `admin.site.admin_view`, which sends anyone who is not active staff
to the admin login.
"""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from django import forms
from django.contrib import admin
from django.http import Http404, HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.utils import timezone

from tenants.models import Tenant
from tenants.reports import charts
from tenants.reports.budgets import budget_overview
from tenants.reports.csvexport import csv_response
from tenants.reports.latency import latency_by_band
from tenants.reports.queries import (
    MEASURES,
    UsageFilter,
    error_types,
    usage_by,
    usage_totals,
)

TABLES: dict[str, tuple[str, list[str]]] = {
    "tenants": ("Usage per tenant", ["tenant", *MEASURES]),
    "users": ("Usage per user", ["tenant", "user", *MEASURES]),
    "models": ("Usage per model", ["model", *MEASURES]),
    "days": ("Usage per day (UTC)", ["day", *MEASURES]),
    "statuses": ("Requests by status", ["status", *MEASURES]),
    "endpoints": ("Usage per API endpoint", ["endpoint", *MEASURES]),
    "errors": ("Failures and refusals by type", ["status", "error_type", "requests"]),
    "latency": (
        "Queue wait and time to first token per band (seconds)",
        ["band_name", "metric_name", "count", "p50", "p90", "p99"],
    ),
    "budgets": (
        "Monthly budgets (this month, UTC)",
        [
            "tenant",
            "key",
            "spent",
            "budget",
            "used_percent",
            "exceeded",
            "policy",
            "refused",
            "rate_limited",
        ],
    ),
}
DIMENSION = {
    "tenants": "tenant",
    "users": "user",
    "models": "model",
    "days": "day",
    "statuses": "status",
    "endpoints": "endpoint",
}


class ReportForm(forms.Form):
    start = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    end = forms.DateField(required=False, widget=forms.DateInput(attrs={"type": "date"}))
    tenant = forms.ModelChoiceField(Tenant.objects.all(), required=False, to_field_name="slug")
    model = forms.CharField(required=False)

    def usage_filter(self) -> UsageFilter:
        today = timezone.now().date()
        data = self.cleaned_data if self.is_valid() else {}
        end: date = data.get("end") or today
        start: date = data.get("start") or end - timedelta(days=29)
        start, end = min(start, end), max(start, end)
        tenant = data.get("tenant")
        return UsageFilter(
            start, end, tenant_id=tenant.pk if tenant else None, model=data.get("model") or ""
        )


def _table(name: str, flt: UsageFilter) -> list[dict[str, Any]]:
    if name in DIMENSION:
        return usage_by(DIMENSION[name], flt)
    if name == "errors":
        return error_types(flt)
    if name == "latency":
        return latency_by_band(flt)
    if name == "budgets":
        return budget_overview(timezone.now())
    raise Http404(name)


def _charts(flt: UsageFilter, tables: dict[str, list[dict[str, Any]]]) -> Any:
    days, latency = tables["days"], tables["latency"]
    per_day = {r["day"]: float(r["cost"]) for r in days}
    span = (flt.end - flt.start).days + 1
    cost_points = [
        ((d := flt.start + timedelta(days=i)).strftime("%m-%d"), per_day.get(d, 0.0))
        for i in range(span)
    ]
    tokens: dict[str, list[tuple[str, float]]] = {}
    for r in tables["models"]:
        tokens[r["model"]] = [
            ("prompt", float(r["prompt_tokens"])),
            ("completion", float(r["completion_tokens"])),
        ]
    waits = [
        (f"{r['band_name']} {r['metric']}", [(f"p{p}", r[f"p{p}"] or 0.0) for p in (50, 90, 99)])
        for r in latency
    ]
    return [
        charts.column_chart(cost_points, "Cost per day", "$"),
        charts.bar_chart(list(tokens.items()), "Tokens per model"),
        charts.bar_chart(waits, "Queue wait and TTFT per band", "s"),
    ]


def _cells(name: str, rows: list[dict[str, Any]], totals: dict[str, Any]) -> dict[str, Any]:
    """A table as plain lists of cells, with a totals line for the usage tables."""
    title, columns = TABLES[name]
    footer = None
    if name in DIMENSION:
        footer = [
            "Total",
            *[""] * (len(columns) - 1 - len(MEASURES)),
            *[totals[m] for m in MEASURES],
        ]
    return {
        "name": name,
        "title": title,
        "columns": [c.replace("_", " ") for c in columns],
        "rows": [[r.get(c) for c in columns] for r in rows],
        "footer": footer,
        "exceeded": [bool(r.get("exceeded")) for r in rows],
    }


def report_view(request: HttpRequest) -> HttpResponse:
    form = ReportForm(request.GET or None)
    flt = form.usage_filter()
    tables = {name: _table(name, flt) for name in TABLES}
    totals = usage_totals(flt)
    context = {
        **admin.site.each_context(request),
        "title": "Usage and cost",
        "form": form,
        "flt": flt,
        "query": request.GET.urlencode(),
        "totals": totals,
        "tables": [_cells(n, tables[n], totals) for n in TABLES],
        "charts": _charts(flt, tables),
    }
    return TemplateResponse(request, "admin/reports/usage.html", context)


def report_csv_view(request: HttpRequest, table: str) -> HttpResponse:
    if table not in TABLES:
        raise Http404(table)
    flt = ReportForm(request.GET or None).usage_filter()
    rows = _table(table, flt)
    columns = TABLES[table][1]
    if table in DIMENSION:
        rows = [*rows, {columns[0]: "total", **usage_totals(flt)}]
    return csv_response(f"{table}-{flt.start}-{flt.end}.csv", columns, rows)
