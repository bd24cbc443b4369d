"""Self-service views: a key's tenant's usage (JSON and CSV), its quota standing, and the audit
trail of its own objects.

Every query is scoped by `api_key_of(request).tenant`, the key's own tenant: no parameter names a
tenant, so no parameter can reach another one.
"""

from __future__ import annotations

from typing import Any

from django.http import HttpResponse
from django.utils import timezone
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from tenants.api.auth import api_key_of
from tenants.api.schema import SelfServiceSchema
from tenants.api.serializers import (
    TENANT_AUDIT_MODELS,
    AuditList,
    AuditQuery,
    QuotaReport,
    UsageQuery,
    UsageReport,
)
from tenants.budget import budget_state, standing
from tenants.models import AuditEntry
from tenants.quota import quota_status
from tenants.reports.budgets import rate_limit_report
from tenants.reports.csvexport import csv_response
from tenants.reports.queries import MEASURES, UsageFilter, usage_by, usage_totals


def _usage(request: Request) -> tuple[dict[str, Any], list[dict[str, Any]], dict[str, Any]]:
    query = UsageQuery(data=request.query_params)
    query.is_valid(raise_exception=True)
    q = query.validated_data
    flt = UsageFilter(
        q["start"],
        q["end"],
        tenant_id=api_key_of(request).tenant_id,
        model=q["model"],
        user=q["user"],
    )
    rows = usage_by(q["group_by"], flt)
    if q["group_by"] == "user":
        rows = [{k: v for k, v in r.items() if k != "tenant"} for r in rows]
    return q, rows, usage_totals(flt)


class UsageView(APIView):
    """Requests, tokens and cost of the key's tenant, per day, model or user."""

    schema = SelfServiceSchema(operation_id_base="Usage", tags=["usage"])
    query_serializer = UsageQuery
    response_serializer = UsageReport

    def get(self, request: Request) -> Response:
        q, rows, totals = _usage(request)
        body = {
            "tenant": api_key_of(request).tenant.slug,
            "start": q["start"],
            "end": q["end"],
            "group_by": q["group_by"],
            "data": rows,
            "totals": totals,
        }
        return Response(UsageReport(body).data)


class UsageCsvView(APIView):
    """The same table as `/usage`, as CSV, with a totals line."""

    schema = SelfServiceSchema(operation_id_base="UsageCsv", tags=["usage"])
    query_serializer = UsageQuery
    csv = True

    def get(self, request: Request) -> HttpResponse:
        q, rows, totals = _usage(request)
        group = q["group_by"]
        name = f"usage-{api_key_of(request).tenant.slug}-{q['start']}-{q['end']}-by-{group}.csv"
        return csv_response(name, (group, *MEASURES), [*rows, {group: "total", **totals}])


class QuotaView(APIView):
    """Consumption against each quota rule that binds the key, and the monthly budget."""

    schema = SelfServiceSchema(operation_id_base="Quota", tags=["quota"])
    response_serializer = QuotaReport

    def get(self, request: Request) -> Response:
        key = api_key_of(request)
        now = timezone.now()
        body = {
            "tenant": key.tenant.slug,
            "user": key.user,
            "rules": quota_status(key, now),
            "budget": budget_state(key.tenant, now, tier=key.tier),
            "rate_limits": rate_limit_report(key, now),
            "key_budget": standing(
                key.tenant_id, key.monthly_budget, str(key.tier.over_budget), now, key.pk
            ),
        }
        return Response(QuotaReport(body).data)


class AuditView(APIView):
    """Changes to the key's tenant, its keys, quota rules and prices, newest first: who (an
    operator, a command, a key), when, and each changed field before and after."""

    schema = SelfServiceSchema(operation_id_base="Audit", tags=["audit"])
    query_serializer = AuditQuery
    response_serializer = AuditList

    def get(self, request: Request) -> Response:
        query = AuditQuery(data=request.query_params)
        query.is_valid(raise_exception=True)
        q = query.validated_data
        key = api_key_of(request)
        entries = AuditEntry.objects.filter(
            tenant_id=key.tenant_id, model__in=TENANT_AUDIT_MODELS
        ).order_by("-id")
        if "model" in q:
            entries = entries.filter(model=q["model"])
        if "before" in q:
            entries = entries.filter(id__lt=q["before"])
        page = list(entries[: q["limit"] + 1])
        more = len(page) > q["limit"]
        page = page[: q["limit"]]
        body = {
            "tenant": key.tenant.slug,
            "data": page,
            "next_before": page[-1].pk if more else None,
        }
        return Response(AuditList(body).data)
