"""Who may open a tenant's page: a member of that tenant, and for changes its administrators.

Every page is addressed by the tenant's slug and resolved against the signed-in person's own
memberships, so a slug (or a key's id) of another tenant is a 404, the same answer as a tenant
that does not exist: the pages never confirm that another tenant is there.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Concatenate, ParamSpec

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import Http404, HttpRequest, HttpResponse

from tenants.models import Membership

P = ParamSpec("P")
View = Callable[Concatenate[HttpRequest, Membership, P], HttpResponse]


def membership_of(request: HttpRequest, slug: str) -> Membership:
    """The signed-in person's membership of the active tenant `slug`, or 404."""
    if not (request.user.is_authenticated and request.user.is_active):
        raise Http404("No such tenant.")
    found = (
        Membership.objects.of(request.user.pk, slug)
        .select_related("tenant", "tenant__default_tier", "user")
        .first()
    )
    if found is None:
        raise Http404("No such tenant.")
    return found


def tenant_page(*, admin_only: bool = False) -> Callable[[View[P]], Callable[..., HttpResponse]]:
    """A view of one tenant, given the caller's membership; `admin_only` refuses members (403:
    they know the tenant, they may not change it)."""

    def decorate(view: View[P]) -> Callable[..., HttpResponse]:
        @login_required(login_url="portal:login")
        @functools.wraps(view)
        def wrapped(
            request: HttpRequest, slug: str, *args: P.args, **kwargs: P.kwargs
        ) -> HttpResponse:
            membership = membership_of(request, slug)
            if admin_only and not membership.is_admin:
                raise PermissionDenied("Only the tenant's administrators may do this.")
            return view(request, membership, *args, **kwargs)

        return wrapped

    return decorate
