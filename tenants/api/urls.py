"""Routes of the self-service API, mounted under `/api/v1/`."""

from __future__ import annotations

from django.urls import path
from rest_framework.permissions import AllowAny
from rest_framework.renderers import JSONOpenAPIRenderer
from rest_framework.schemas import get_schema_view

from tenants.api.schema import SelfServiceSchemaGenerator
from tenants.api.views import AuditView, QuotaView, UsageCsvView, UsageView

app_name = "selfservice"

api_patterns = [
    path("usage", UsageView.as_view(), name="usage"),
    path("usage.csv", UsageCsvView.as_view(), name="usage-csv"),
    path("quota", QuotaView.as_view(), name="quota"),
    path("audit", AuditView.as_view(), name="audit"),
]

urlpatterns = [
    *api_patterns,
    path(
        "openapi.json",
        get_schema_view(
            title="LLM-Server self-service API",
            description="Usage, cost, quota and the audit trail of the tenant that owns the "
            "API key. "
            "Authenticate with `Authorization: Bearer <API key>`.",
            version="1",
            public=True,
            renderer_classes=[JSONOpenAPIRenderer],
            permission_classes=[AllowAny],
            authentication_classes=[],
            generator_class=SelfServiceSchemaGenerator,
        ),
        name="openapi",
    ),
]
