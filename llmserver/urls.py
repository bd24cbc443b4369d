"""Django URL routes: the admin, its report pages and dashboard, the self-service API and the
tenants' own pages.

The OpenAI API is routed in asgi.py. The report pages sit before `admin/` so that the admin's
catch-all does not swallow them; they are wrapped in `admin_view` (staff only) and need a
named permission (`tenants.view_usage_report`, `tenants.view_queue_dashboard`): 403 without.
Static files are served here too (see below). Single sign-on's routes (/oidc/) exist only when
it is configured (`settings.SSO`).
"""

from __future__ import annotations

from django.conf import settings
from django.contrib import admin
from django.contrib.auth.decorators import permission_required
from django.contrib.staticfiles.views import serve as serve_static
from django.urls import include, path, re_path

from llmserver.dashboard import dashboard_view
from tenants.reports.views import report_csv_view, report_view

REPORTS = permission_required("tenants.view_usage_report", raise_exception=True)
DASHBOARD = permission_required("tenants.view_queue_dashboard", raise_exception=True)

urlpatterns = [
    path("admin/reports/", admin.site.admin_view(REPORTS(report_view)), name="usage-report"),
    path(
        "admin/reports/<slug:table>.csv",
        admin.site.admin_view(REPORTS(report_csv_view)),
        name="usage-report-csv",
    ),
    path(
        "admin/dashboard/",
        admin.site.admin_view(DASHBOARD(dashboard_view)),
        name="queue-dashboard",
    ),
    path("admin/", admin.site.urls),
    path("api/v1/", include("tenants.api.urls")),
    # The tenants' own pages (their administrators and members; tenants/portal/).
    path("portal/", include("tenants.portal.urls")),
    # daphne serves no static files and deployments may have no web server in front: the
    # admin's own CSS and JS come from the app directories through Django (small, cacheable).
    re_path(r"^static/(?P<path>.*)$", serve_static, {"insecure": True}),
]
if settings.SSO is not None:
    urlpatterns.append(path("oidc/", include("tenants.sso.urls")))
