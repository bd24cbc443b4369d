"""Django URL routes: the admin and the self-service API. The OpenAI API is routed in asgi.py."""

from __future__ import annotations

from django.contrib import admin
from django.urls import include, path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", include("tenants.api.urls")),
]
