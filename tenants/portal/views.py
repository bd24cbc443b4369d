"""The portal's pages. Administrators see and manage the whole tenant; a member sees their own
usage, queue and keys. Every query is scoped by the membership `tenant_page` resolved, never by
an id from the request alone."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.db import IntegrityError, transaction
from django.db.models import QuerySet, Sum
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.utils import timezone
from django.views.decorators.http import require_POST

from tenants.api.serializers import TENANT_AUDIT_MODELS
from tenants.budget import budget_state, standing
from tenants.models import ApiKey, AuditEntry, Membership, Role, UsageStatus
from tenants.models.rules import Window, window_start
from tenants.portal.access import tenant_page
from tenants.portal.forms import KeyForm, MemberForm, RoleForm
from tenants.reports.queries import UsageFilter, usage_by, usage_totals

REFUSALS = {
    "rate_limit_exceeded": "rate limit",
    "quota_exceeded": "quota",
    "budget_exceeded": "budget",
}
AUDIT_SHOWN = 200
PORTAL_AUDIT_MODELS = (*TENANT_AUDIT_MODELS, "tenants.membership")


def home(request: HttpRequest) -> HttpResponse:
    """The one tenant a person belongs to, or the list to choose from."""
    if not request.user.is_authenticated:
        return redirect("portal:login")
    memberships = list(
        Membership.objects.select_related("tenant").filter(
            user_id=request.user.pk, tenant__is_active=True
        )
    )
    if len(memberships) == 1:
        return redirect("portal:overview", slug=memberships[0].tenant.slug)
    return render(request, "portal/home.html", {"memberships": memberships})


def _keys(membership: Membership) -> QuerySet[ApiKey]:
    """The keys the person manages: all the tenant's for an administrator, a member's own (by
    who made them, not by the principal's name, which a service may share with a person)."""
    keys = ApiKey.objects.filter(tenant=membership.tenant).order_by("revoked", "user", "name")
    return keys if membership.is_admin else keys.filter(owner_id=membership.user_id)


def _context(membership: Membership, **more: Any) -> dict[str, Any]:
    return {"membership": membership, "tenant": membership.tenant, **more}


@tenant_page()
def overview(request: HttpRequest, membership: Membership) -> HttpResponse:
    """This month's usage and cost, budgets, refusals (the tenant's, or a member's own)."""
    tenant, now = membership.tenant, timezone.now()
    month = window_start(Window.MONTH, now)
    own = None if membership.is_admin else tuple(_keys(membership).values_list("pk", flat=True))
    flt = UsageFilter(month.date(), now.date(), tenant_id=tenant.pk, keys=own)
    # From the daily sums, which hold every request whatever the retention.
    refused = flt.daily().filter(status=UsageStatus.REJECTED, error_type__in=list(REFUSALS))
    counts = dict(refused.values_list("error_type").annotate(n=Sum("requests")).order_by())
    policy = str(tenant.default_tier.over_budget)
    key_budgets = [
        (key, standing(tenant.pk, key.monthly_budget, policy, now, key.pk))
        for key in _keys(membership).filter(monthly_budget__isnull=False, revoked=False)
    ]
    return render(
        request,
        "portal/overview.html",
        _context(
            membership,
            section="overview",
            since=month.date(),
            by_user=usage_by("user", flt),
            by_model=usage_by("model", flt),
            totals=usage_totals(flt),
            budget=budget_state(tenant, now),
            key_budgets=key_budgets,
            refusals=[(label, counts.get(code, 0)) for code, label in REFUSALS.items()],
            tier=tenant.default_tier,
        ),
    )


@tenant_page()
def queue(request: HttpRequest, membership: Membership) -> HttpResponse:
    """The tenant's lanes in the scheduler (a member's own), live over a WebSocket that the
    gateway feeds from each scheduler snapshot (`llmserver.dashboard.TenantQueueConsumer`)."""
    return render(request, "portal/queue.html", _context(membership, section="queue"))


@tenant_page()
def keys(request: HttpRequest, membership: Membership) -> HttpResponse:
    """The keys (a member's own) and a form for a new one, whose secret is shown once."""
    if request.method == "POST":
        form = KeyForm(request.POST, membership=membership)
        if form.is_valid():
            key = form.save(commit=False)
            key.tenant, key.owner = membership.tenant, membership.user
            secret = key.set_new_secret()
            key.save()
            return _show_secret(request, membership, key, secret)
    else:
        form = KeyForm(membership=membership)
    return render(
        request,
        "portal/keys.html",
        _context(membership, section="keys", keys=_keys(membership), form=form, now=timezone.now()),
    )


def _key(membership: Membership, key_id: int) -> ApiKey:
    return get_object_or_404(_keys(membership), pk=key_id)


def _show_secret(
    request: HttpRequest, membership: Membership, key: ApiKey, secret: str
) -> HttpResponse:
    response = render(
        request,
        "portal/key_secret.html",
        _context(membership, section="keys", key=key, secret=secret),
    )
    response["Cache-Control"] = "no-store"
    return response


@tenant_page()
def key_edit(request: HttpRequest, membership: Membership, key_id: int) -> HttpResponse:
    key = _key(membership, key_id)
    if request.method == "POST":
        form = KeyForm(request.POST, instance=key, membership=membership)
        if form.is_valid():
            form.save()
            messages.success(request, f"Key {key.prefix}… saved.")
            return redirect("portal:keys", slug=membership.tenant.slug)
    else:
        form = KeyForm(instance=key, membership=membership)
    return render(
        request, "portal/key_edit.html", _context(membership, section="keys", key=key, form=form)
    )


@require_POST
@tenant_page()
def key_rotate(request: HttpRequest, membership: Membership, key_id: int) -> HttpResponse:
    """A new secret for the same key: its settings, budget and usage history stay; the old
    secret stops working at once."""
    key = _key(membership, key_id)
    if key.revoked:
        raise Http404("A revoked key cannot be rotated.")
    secret = key.set_new_secret()
    key.save(update_fields=["prefix", "hashed"])
    return _show_secret(request, membership, key, secret)


@require_POST
@tenant_page()
def key_revoke(request: HttpRequest, membership: Membership, key_id: int) -> HttpResponse:
    key = _key(membership, key_id)
    key.revoked = True
    key.save(update_fields=["revoked"])
    messages.success(request, f"Key {key.prefix}… revoked.")
    return redirect("portal:keys", slug=membership.tenant.slug)


@tenant_page(admin_only=True)
def members(request: HttpRequest, membership: Membership) -> HttpResponse:
    tenant = membership.tenant
    form = MemberForm(request.POST or None, tenant=tenant)
    if request.method == "POST" and form.is_valid():
        try:
            with transaction.atomic():
                Membership.objects.create(
                    tenant=tenant, user=form.cleaned_data["person"], role=form.cleaned_data["role"]
                )
        except IntegrityError:  # the same person added twice at once
            form.add_error("person", "That person is already a member.")
        else:
            messages.success(request, f"{form.cleaned_data['person']} added.")
            return redirect("portal:members", slug=tenant.slug)
    listed = Membership.objects.filter(tenant=tenant).select_related("user")
    return render(
        request,
        "portal/members.html",
        _context(membership, section="members", members=listed, form=form, roles=Role.choices),
    )


def _locked(membership: Membership, member_id: int) -> tuple[Membership, bool]:
    """The tenant's member `member_id` (404 if none) and whether they are its last
    administrator, with every administrator's row locked in id order first: two administrators
    demoting each other at once cannot both see the other one still there."""
    admins = list(
        Membership.objects.select_for_update()
        .filter(tenant=membership.tenant, role=Role.ADMIN)
        .order_by("pk")
        .values_list("pk", flat=True)
    )
    member = get_object_or_404(
        Membership.objects.select_for_update(), tenant=membership.tenant, pk=member_id
    )
    return member, admins == [member.pk]


@require_POST
@tenant_page(admin_only=True)
def member_role(request: HttpRequest, membership: Membership, member_id: int) -> HttpResponse:
    slug = membership.tenant.slug
    with transaction.atomic():
        member, last_admin = _locked(membership, member_id)
        form = RoleForm(request.POST)
        if not form.is_valid():
            messages.error(request, "Unknown role.")
        elif form.cleaned_data["role"] != Role.ADMIN and last_admin:
            messages.error(request, "A tenant keeps at least one administrator.")
        else:
            member.role = form.cleaned_data["role"]
            member.save(update_fields=["role"])
            messages.success(request, f"{member.user} is now {member.get_role_display()}.")
    return redirect("portal:members", slug=slug)


@require_POST
@tenant_page(admin_only=True)
def member_remove(request: HttpRequest, membership: Membership, member_id: int) -> HttpResponse:
    slug = membership.tenant.slug
    with transaction.atomic():
        member, last_admin = _locked(membership, member_id)
        if last_admin:
            messages.error(request, "A tenant keeps at least one administrator.")
        else:
            # Whoever leaves takes no working key along: the keys they made here are revoked.
            revoked = 0
            for key in ApiKey.objects.filter(tenant=membership.tenant, owner_id=member.user_id):
                if not key.revoked:
                    key.revoked, revoked = True, revoked + 1
                    key.save(update_fields=["revoked"])
            member.delete()
            messages.success(request, f"{member.user} removed; {revoked} of their keys revoked.")
    if member.pk is None and member.user_id == request.user.pk:
        return redirect("portal:home")
    return redirect("portal:members", slug=slug)


@tenant_page(admin_only=True)
def audit(request: HttpRequest, membership: Membership) -> HttpResponse:
    """Changes to the tenant's own objects, newest first: the tenant itself, its keys, members,
    quota rules and prices."""
    entries = AuditEntry.objects.filter(
        tenant_id=membership.tenant.pk, model__in=PORTAL_AUDIT_MODELS
    ).order_by("-id")[:AUDIT_SHOWN]
    return render(
        request,
        "portal/audit.html",
        _context(membership, section="audit", entries=entries, shown=AUDIT_SHOWN),
    )
