"""Single sign-on's pages: the start of a login, the provider's callback, and the refusal.

mozilla-django-oidc's views run the flow (state, nonce and PKCE in the session, a state the
session does not hold refused with 400); these choose where a login lands (`landing`), how long
its session lasts (`SsoConfig.session_seconds`: roles are read again only at a login, so this
bounds how long a role revoked at the provider outlives it), and say why a login was refused.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.contrib import admin, messages
from django.contrib.auth.models import AbstractBaseUser, AnonymousUser
from django.http import HttpRequest, HttpResponse, HttpResponseBase
from django.shortcuts import render, resolve_url
from django.urls import reverse
from django.views import View
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from tenants.sso.config import current
from tenants.sso.discovery import DiscoveryError, provider

UNAVAILABLE = "Single sign-on is unavailable: the identity provider cannot be reached."


def landing(user: AbstractBaseUser | AnonymousUser, next_url: str | None) -> str:
    """Operators to the admin, everyone else to the tenant pages (`LOGIN_REDIRECT_URL`); the
    page asked for (`?next=`, already checked to be on this site) when it is theirs to see."""
    admin = reverse("admin:index")
    staff = bool(getattr(user, "is_staff", False))
    if next_url and (staff or not next_url.startswith(admin)):
        return next_url
    return admin if staff else resolve_url(settings.LOGIN_REDIRECT_URL)


def refused(request: HttpRequest, status: int = 403) -> HttpResponse:
    """Why a single sign-on login did not sign anyone in, and the ways on."""
    return render(request, "sso/refused.html", admin.site.each_context(request), status=status)


class SsoLoginView(OIDCAuthenticationRequestView):  # type: ignore[misc]  # untyped library
    def __init__(self, **kwargs: Any) -> None:
        # Not the library's __init__, which reads the endpoint from the settings: it is
        # discovered (`get`), and a provider that is down must give a page, not a server error.
        View.__init__(self, **kwargs)
        self.OIDC_RP_CLIENT_ID = current().client_id

    def get(self, request: HttpRequest) -> HttpResponseBase:
        try:
            self.OIDC_OP_AUTH_ENDPOINT = provider(current()).authorization
        except DiscoveryError:
            messages.error(request, UNAVAILABLE)
            return refused(request, status=503)
        response: HttpResponseBase = super().get(request)
        return response


class SsoCallbackView(OIDCAuthenticationCallbackView):  # type: ignore[misc]  # untyped library
    @property
    def failure_url(self) -> str:
        return reverse("sso-refused")

    @property
    def success_url(self) -> str:
        return landing(self.user, self.request.session.get("oidc_login_next"))

    def login_success(self) -> HttpResponseBase:
        response: HttpResponseBase = super().login_success()
        self.request.session.set_expiry(current().session_seconds)
        return response

    def get(self, request: HttpRequest) -> HttpResponseBase:
        error = request.GET.get("error")
        if error:
            messages.error(request, f"The identity provider did not sign you in ({error[:100]}).")
        response: HttpResponseBase = super().get(request)
        return response


def refused_view(request: HttpRequest) -> HttpResponse:
    return refused(request)
