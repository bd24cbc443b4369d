"""The operators' admin: tiers, tenants, keys, rules, backends and (read-only) usage."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from tenants.models import (
    ApiKey,
    Backend,
    CostRule,
    FairSharePolicy,
    ModelRoute,
    ModelTokenWeights,
    QuotaRule,
    Tenant,
    Tier,
    UsageRecord,
)
from tenants.models.keys import PREFIX_LENGTH, generate_key, hash_key
from tenants.models.tiers import band_gates


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
    readonly_fields = ["prefix", "last_used_at"]
    show_change_link = True

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        # A key's secret can only be shown from its own add page.
        return False


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
    inlines = [ApiKeyInline, QuotaRuleInline]


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
            secret = generate_key()
            obj.prefix, obj.hashed = secret[:PREFIX_LENGTH], hash_key(secret)
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
        count = queryset.update(revoked=True)
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


@admin.register(UsageRecord)
class UsageRecordAdmin(admin.ModelAdmin[Any]):
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

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False
