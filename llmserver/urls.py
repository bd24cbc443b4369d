"""Django URL routes: the admin, its report pages and dashboard, and the self-service API.

The OpenAI API is routed in asgi.py. The report pages sit before `admin/` so that the admin's
catch-all does not swallow them; they are wrapped in `admin_view` (staff only).
Static files are served here too (see below).
"""

from __future__ import annotations

from django.contrib import admin
from django.contrib.staticfiles.views import serve as serve_static
from django.urls import include, path, re_path

from llmserver.dashboard import dashboard_view
from tenants.reports.views import report_csv_view, report_view

urlpatterns = [
    path("admin/reports/", admin.site.admin_view(report_view), name="usage-report"),
    path(
        "admin/reports/<slug:table>.csv",
        admin.site.admin_view(report_csv_view),
        name="usage-report-csv",
    ),
    path("admin/dashboard/", admin.site.admin_view(dashboard_view), name="queue-dashboard"),
    path("admin/", admin.site.urls),
    path("api/v1/", include("tenants.api.urls")),
    # daphne serves no static files and deployments may have no web server in front: the
    # admin's own CSS and JS come from the app directories through Django (small, cacheable).
    re_path(r"^static/(?P<path>.*)$", serve_static, {"insecure": True}),
]
