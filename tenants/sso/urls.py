"""Single sign-on's routes, under /oidc/ (llmserver/urls.py includes them only when it is on).

The names of the first two are mozilla-django-oidc's own, which it reverses: the provider is
given `https://<host>/oidc/callback/` as the client's redirect URI.
"""

from __future__ import annotations

from django.urls import path

from tenants.sso.views import SsoCallbackView, SsoLoginView, refused_view

urlpatterns = [
    path("authenticate/", SsoLoginView.as_view(), name="oidc_authentication_init"),
    path("callback/", SsoCallbackView.as_view(), name="oidc_authentication_callback"),
    path("refused/", refused_view, name="sso-refused"),
]
