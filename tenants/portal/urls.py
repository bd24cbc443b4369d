"""/portal/: sign-in, the tenant chooser, and each tenant's pages by its slug."""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import path

from tenants.portal import views

app_name = "portal"

urlpatterns = [
    path(
        "login/",
        auth_views.LoginView.as_view(
            template_name="portal/login.html",
            next_page="portal:home",
            redirect_authenticated_user=True,
        ),
        name="login",
    ),
    path("logout/", auth_views.LogoutView.as_view(next_page="portal:login"), name="logout"),
    path("", views.home, name="home"),
    path("<slug:slug>/", views.overview, name="overview"),
    path("<slug:slug>/queue/", views.queue, name="queue"),
    path("<slug:slug>/keys/", views.keys, name="keys"),
    path("<slug:slug>/keys/<int:key_id>/", views.key_edit, name="key-edit"),
    path("<slug:slug>/keys/<int:key_id>/rotate/", views.key_rotate, name="key-rotate"),
    path("<slug:slug>/keys/<int:key_id>/revoke/", views.key_revoke, name="key-revoke"),
    path("<slug:slug>/members/", views.members, name="members"),
    path("<slug:slug>/members/<int:member_id>/role/", views.member_role, name="member-role"),
    path("<slug:slug>/members/<int:member_id>/remove/", views.member_remove, name="member-remove"),
    path("<slug:slug>/audit/", views.audit, name="audit"),
]
