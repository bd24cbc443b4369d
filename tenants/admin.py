"""The operators' admin: tiers, tenants, keys, rules, backends, (read-only) usage and the
(read-only, append-only) audit trail."""

from __future__ import annotations

import json
from typing import Any

from django.contrib import admin, messages
from django.core.serializers.json import DjangoJSONEncoder
from django.db.models import QuerySet
from django.http import HttpRequest, HttpResponse
from django.utils.html import format_html, format_html_join

from tenants.models import (
    ApiKey,
    AuditEntry,
    Backend,
    Batch,
    CostRule,
    FairSharePolicy,
    Membership,
    ModelRoute,
    ModelTokenWeights,
    QuotaRule,
    StoredFile,
    Tenant,
    Tier,
    UsageRecord,
)
from tenants.models.tiers import band_gates
from tenants.reports.csvexport import csv_response


@admin.register(Tier)
class TierAdmin(admin.ModelAdmin[Any]):
    list_display = [
        "name",
        "band",
        "weight",
        "max_concurrent_per_user",
        "max_queued_per_user",
        "queue_timeout_seconds",
        "gate_max_waiting",
        "gate_max_tpot_ms",
        "gate_max_kv_cache_usage",
        "over_budget",
        "preemptible",
        "preempt_after_ms",
        "rpm_per_key",
        "tpm_per_key",
    ]
    list_filter = ["band", "over_budget"]
    search_fields = ["name"]
    fieldsets = [
        (None, {"fields": ["name", "band", "weight", "over_budget"]}),
        (
            "Per-user limits",
            {"fields": ["max_concurrent_per_user", "max_queued_per_user", "queue_timeout_seconds"]},
        ),
        (
            "Gate for this band",
            {
                "fields": [
                    "gate_max_waiting",
                    "gate_max_tpot_ms",
                    "gate_max_kv_cache_usage",
                    "gate_in_force",
                ]
            },
        ),
        ("Making room", {"fields": ["preempt_after_ms", "preemptible"]}),
        ("Order and aging", {"fields": ["within_principal", "aging_seconds"]}),
        ("Rate limits per key (sliding minute)", {"fields": ["rpm_per_key", "tpm_per_key"]}),
    ]
    readonly_fields = ["gate_in_force"]

    @admin.display(description="Gate in force")
    def gate_in_force(self, tier: Tier) -> str:
        """The scheduler gates bands, not tiers: with other tiers in the band, say which
        thresholds it really applies (the strictest of each)."""
        if tier.pk is None:
            return "Saved tiers only."
        others = list(
            Tier.objects.filter(band=tier.band).exclude(pk=tier.pk).values_list("name", flat=True)
        )
        if not others:
            return "This tier's own thresholds: no other tier shares its band."
        gate = band_gates()[tier.band]
        waiting = "no limit" if gate.max_waiting is None else f"{gate.max_waiting}"
        tpot = (
            "no limit" if gate.max_tpot_seconds is None else f"{gate.max_tpot_seconds * 1000:g} ms"
        )
        kv = "no limit" if gate.max_kv_cache_usage is None else f"{gate.max_kv_cache_usage:g}"
        return (
            f"Shared with {', '.join(sorted(others))}: the band's gate uses the strictest of "
            f"each threshold, now waiting {waiting}, time per token {tpot}, KV cache {kv}."
        )


class ApiKeyInline(admin.TabularInline[Any, Any]):
    model = ApiKey
    extra = 0
    fields = ["prefix", "user", "name", "app_type", "tier_override", "revoked", "last_used_at"]
    # A summary with quick revocation: the rest is edited on the key's own page (linked). Six
    # editable inputs per row made a tenant with long key names wider than a 1280 px screen.
    readonly_fields = ["prefix", "user", "name", "app_type", "tier_override", "last_used_at"]
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A key's secret can only be shown from its own add page.
        return False


class MembershipInline(admin.TabularInline[Any, Any]):
    model = Membership
    extra = 0
    fields = ["user", "role", "created_at"]
    readonly_fields = ["created_at"]
    autocomplete_fields = ["user"]


class QuotaRuleInline(admin.TabularInline[Any, Any]):
    model = QuotaRule
    fk_name = "tenant"
    extra = 0
    fields = ["model_pattern", "window", "metric", "limit", "per_user"]


@admin.register(Tenant)
class TenantAdmin(admin.ModelAdmin[Any]):
    list_display = [
        "name",
        "slug",
        "default_tier",
        "is_active",
        "monthly_budget",
        "rpm_limit",
        "tpm_limit",
        "created_at",
    ]
    list_filter = ["is_active", "default_tier"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline, ApiKeyInline, QuotaRuleInline]


@admin.register(ApiKey)
class ApiKeyAdmin(admin.ModelAdmin[Any]):
    list_display = [
        "prefix",
        "tenant",
        "user",
        "name",
        "app_type",
        "tier_override",
        "monthly_budget",
        "active",
        "expires_at",
        "last_used_at",
    ]
    list_filter = ["revoked", "app_type", "tenant", "tier_override"]
    search_fields = ["prefix", "user", "name", "tenant__name", "tenant__slug"]
    readonly_fields = ["prefix", "last_used_at", "created_at"]
    list_select_related = ["tenant", "tier_override"]
    actions = ["revoke"]

    def save_model(self, request: HttpRequest, obj: ApiKey, form: Any, change: bool) -> None:
        if not change:
            secret = obj.set_new_secret()
            messages.warning(
                request,
                f"The new key is {secret} . Copy it now: it is not stored and not shown again.",
            )
        super().save_model(request, obj, form, change)

    @admin.display(boolean=True, description="active", ordering="revoked")
    def active(self, obj: ApiKey) -> bool:
        """A green tick for a key in use, a red cross for a revoked one: "revoked" as a boolean
        column showed a red cross for every key that was fine."""
        return not obj.revoked

    @admin.action(description="Revoke the selected keys")
    def revoke(self, request: HttpRequest, queryset: QuerySet[ApiKey]) -> None:
        # One save per key, not `update()`: a save is what the audit trail records.
        count = 0
        for key in queryset.filter(revoked=False).select_related("tenant"):
            key.revoked = True
            key.save(update_fields=["revoked"])
            count += 1
        self.message_user(request, f"Revoked {count} key(s).")


@admin.register(QuotaRule)
class QuotaRuleAdmin(admin.ModelAdmin[Any]):
    list_display = [
        "__str__",
        "tenant",
        "tier",
        "model_pattern",
        "window",
        "metric",
        "limit",
        "per_user",
    ]
    list_filter = ["window", "metric", "per_user", "tier"]
    search_fields = ["tenant__name", "tenant__slug", "model_pattern"]


@admin.register(CostRule)
class CostRuleAdmin(admin.ModelAdmin[Any]):
    list_display = [
        "model",
        "tenant",
        "input_per_million",
        "output_per_million",
        "currency",
        "effective_from",
    ]
    list_filter = ["model", "tenant"]
    search_fields = ["model"]
    date_hierarchy = "effective_from"


class ModelTokenWeightsInline(admin.TabularInline[Any, Any]):
    model = ModelTokenWeights
    extra = 0


@admin.register(FairSharePolicy)
class FairSharePolicyAdmin(admin.ModelAdmin[Any]):
    """One row: the gateway creates it on its first start from the environment's settings."""

    list_display = ["__str__", "unit", "input_weight", "output_weight"]
    inlines = [ModelTokenWeightsInline]

    def has_add_permission(self, request: HttpRequest) -> bool:
        return not FairSharePolicy.objects.exists()

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


class ModelRouteInline(admin.TabularInline[Any, Any]):
    model = ModelRoute
    extra = 1
    fields = ["public_name", "upstream_model", "enabled"]


@admin.register(Backend)
class BackendAdmin(admin.ModelAdmin[Any]):
    list_display = [
        "name",
        "kind",
        "base_url",
        "metrics_url",
        "enabled",
        "max_in_flight",
        "capacity",
        "priority_scheduling",
        "preemption",
    ]
    list_filter = ["kind", "enabled"]
    search_fields = ["name", "base_url"]
    inlines = [ModelRouteInline]


@admin.register(ModelRoute)
class ModelRouteAdmin(admin.ModelAdmin[Any]):
    list_display = ["public_name", "backend", "upstream_model", "enabled"]
    list_filter = ["enabled", "backend"]
    search_fields = ["public_name", "upstream_model", "backend__name"]
    list_select_related = ["backend"]


class ReadOnlyAdmin(admin.ModelAdmin[Any]):
    """Records the gateway keeps (usage, the audit trail, the Batch API's): operators look; nobody
    adds, edits or deletes them here."""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


@admin.register(UsageRecord)
class UsageRecordAdmin(ReadOnlyAdmin):
    list_display = [
        "request_id",
        "queued_at",
        "tenant",
        "user",
        "model",
        "backend",
        "band",
        "status",
        "prompt_tokens",
        "completion_tokens",
        "cost",
    ]
    list_filter = ["status", "band", "model", "tenant"]
    search_fields = ["request_id", "user", "model", "tenant__slug"]
    date_hierarchy = "queued_at"
    list_select_related = ["tenant"]


AUDIT_CSV_COLUMNS = (
    "id",
    "at",
    "actor_kind",
    "actor",
    "address",
    "action",
    "model",
    "object_id",
    "object_repr",
    "tenant_id",
    "changes",
)


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    """Who changed what: readable with `tenants.view_auditentry`, never added, changed or
    deleted here (the model has no such permissions to grant)."""

    list_display = [
        "at",
        "actor",
        "address",
        "action",
        "model",
        "object_repr",
        "tenant",
        "changed_fields",
    ]
    list_filter = ["model", "action", "actor_kind", "actor", "at"]
    search_fields = ["object_repr", "object_id", "actor", "address"]
    date_hierarchy = "at"
    list_select_related = ["tenant"]
    fields = [
        "at",
        "actor_kind",
        "actor",
        "address",
        "action",
        "model",
        "object_id",
        "object_repr",
        "tenant",
        "changes_table",
    ]
    actions = ["export_csv"]

    @admin.display(description="fields")
    def changed_fields(self, entry: AuditEntry) -> str:
        return ", ".join(entry.changes)

    @admin.display(description="changes (before, after)")
    def changes_table(self, entry: AuditEntry) -> str:
        rows = format_html_join(
            "",
            "<tr><th>{}</th><td>{}</td><td>{}</td></tr>",
            (
                (name, _text(before), _text(after))
                for name, (before, after) in entry.changes.items()
            ),
        )
        return format_html(
            "<table><tr><th>field</th><th>before</th><th>after</th></tr>{}</table>", rows
        )

    @admin.action(description="Download the selected entries as CSV", permissions=["view"])
    def export_csv(self, request: HttpRequest, queryset: QuerySet[AuditEntry]) -> HttpResponse:
        rows = (
            {
                **{c: getattr(e, c) for c in AUDIT_CSV_COLUMNS},
                "changes": json.dumps(e.changes, cls=DjangoJSONEncoder),
            }
            for e in queryset.order_by("id")
        )
        return csv_response("audit-trail.csv", AUDIT_CSV_COLUMNS, rows)


def _text(value: Any) -> str:
    return "" if value is None else str(value)


@admin.register(StoredFile)
class StoredFileAdmin(ReadOnlyAdmin):
    list_display = ["id", "created_at", "tenant", "user", "filename", "purpose", "bytes"]
    list_filter = ["purpose", "tenant"]
    search_fields = ["id", "filename", "user", "tenant__slug"]
    date_hierarchy = "created_at"
    list_select_related = ["tenant"]


@admin.register(Batch)
class BatchAdmin(ReadOnlyAdmin):
    list_display = [
        "id",
        "created_at",
        "tenant",
        "user",
        "endpoint",
        "model",
        "status",
        "total",
        "completed",
        "failed",
        "runner",
    ]
    list_filter = ["status", "endpoint", "tenant"]
    search_fields = ["id", "user", "model", "input_file_id", "tenant__slug"]
    date_hierarchy = "created_at"
    list_select_related = ["tenant"]
