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
    ModelRoute,
    QuotaRule,
    Tenant,
    Tier,
    UsageRecord,
)
from tenants.models.keys import PREFIX_LENGTH, generate_key, hash_key


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
            {"fields": ["gate_max_waiting", "gate_max_tpot_ms", "gate_max_kv_cache_usage"]},
        ),
        ("Making room", {"fields": ["preempt_after_ms", "preemptible"]}),
    ]


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
    list_display = ["name", "slug", "default_tier", "is_active", "monthly_budget", "created_at"]
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
    list_display = ["model", "input_per_million", "output_per_million", "effective_from"]
    list_filter = ["model"]
    search_fields = ["model"]
    date_hierarchy = "effective_from"


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
