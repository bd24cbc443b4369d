"""Query parameters and response rows of the self-service API."""

from __future__ import annotations

from datetime import date, timedelta
from typing import Any

from django.utils import timezone
from rest_framework import serializers

MAX_DAYS = 366


class UsageQuery(serializers.Serializer[Any]):
    """`?start=&end=` (inclusive UTC days; default: this month so far), `model`, `user`, `group_by`."""

    start = serializers.DateField(required=False, help_text="First UTC day, YYYY-MM-DD.")
    end = serializers.DateField(required=False, help_text="Last UTC day (inclusive).")
    model = serializers.CharField(required=False, default="", max_length=128)
    user = serializers.CharField(required=False, default="", max_length=128)
    group_by = serializers.ChoiceField(choices=["day", "model", "user", "endpoint"], default="day")

    def validate(self, attrs: dict[str, Any]) -> dict[str, Any]:
        today = timezone.now().date()
        end: date = attrs.get("end") or today
        start: date = attrs.get("start") or end.replace(day=1)
        if start > end:
            raise serializers.ValidationError({"start": "start must not be after end."})
        if end - start > timedelta(days=MAX_DAYS):
            raise serializers.ValidationError({"start": f"At most {MAX_DAYS} days at a time."})
        return {**attrs, "start": start, "end": end}


class UsageRow(serializers.Serializer[Any]):
    day = serializers.DateField(required=False)
    model = serializers.CharField(required=False)
    user = serializers.CharField(required=False)
    endpoint = serializers.CharField(required=False)
    requests = serializers.IntegerField(
        help_text="Requests served, failed or cancelled: all but the refused."
    )
    refused = serializers.IntegerField(
        help_text="Requests refused before any backend saw them (rate limit, quota, queue)."
    )
    prompt_tokens = serializers.IntegerField()
    completion_tokens = serializers.IntegerField()
    total_tokens = serializers.IntegerField()
    cost = serializers.DecimalField(max_digits=20, decimal_places=8, coerce_to_string=True)


class UsageReport(serializers.Serializer[Any]):
    tenant = serializers.CharField()
    start = serializers.DateField()
    end = serializers.DateField()
    group_by = serializers.CharField()
    data = UsageRow(many=True)  # type: ignore[assignment]  # a field named like the base's property
    totals = UsageRow()


class QuotaRow(serializers.Serializer[Any]):
    id = serializers.IntegerField(source="rule.pk")
    scope = serializers.SerializerMethodField()
    model_pattern = serializers.CharField(source="rule.model_pattern")
    window = serializers.CharField(source="rule.window")
    metric = serializers.CharField(source="rule.metric")
    per_user = serializers.BooleanField(source="rule.per_user")
    limit = serializers.DecimalField(source="rule.limit", max_digits=18, decimal_places=4)
    consumed = serializers.DecimalField(max_digits=24, decimal_places=8)
    remaining = serializers.SerializerMethodField()
    exceeded = serializers.BooleanField()
    window_start = serializers.DateTimeField()
    window_end = serializers.DateTimeField()

    def get_scope(self, obj: Any) -> str:
        return "tenant" if obj.rule.tenant_id else "tier"

    def get_remaining(self, obj: Any) -> str:
        return str(max(obj.rule.limit - obj.consumed, 0))


class BudgetRow(serializers.Serializer[Any]):
    spent = serializers.DecimalField(max_digits=24, decimal_places=8)
    budget = serializers.DecimalField(max_digits=14, decimal_places=4, allow_null=True)
    exceeded = serializers.BooleanField()
    action = serializers.CharField()
    month_start = serializers.DateTimeField()
    month_end = serializers.DateTimeField()


class RateLimitRow(serializers.Serializer[Any]):
    """The key's RPM/TPM limits (null: none) and what they refused this month (UTC)."""

    requests_per_minute = serializers.IntegerField(allow_null=True)
    tokens_per_minute = serializers.IntegerField(allow_null=True)
    tenant_requests_per_minute = serializers.IntegerField(allow_null=True)
    tenant_tokens_per_minute = serializers.IntegerField(allow_null=True)
    refused_this_month = serializers.IntegerField()


class QuotaReport(serializers.Serializer[Any]):
    tenant = serializers.CharField()
    user = serializers.CharField()
    rules = QuotaRow(many=True)
    budget = BudgetRow()
    key_budget = BudgetRow(help_text="This API key's own monthly budget (blank budget: none).")
    rate_limits = RateLimitRow()


TENANT_AUDIT_MODELS = ("tenants.tenant", "tenants.apikey", "tenants.quotarule", "tenants.costrule")
AUDIT_PAGE = 100
AUDIT_PAGE_MAX = 500


class AuditQuery(serializers.Serializer[Any]):
    """`?model=` (one of the tenant's own kinds of object), `before=` (an entry id: the page
    after it, going back), `limit=` (newest first)."""

    model = serializers.ChoiceField(
        choices=list(TENANT_AUDIT_MODELS),
        required=False,
        help_text="Only entries about this model.",
    )
    before = serializers.IntegerField(
        required=False, min_value=1, help_text="Only entries older than this id (the next page)."
    )
    limit = serializers.IntegerField(
        required=False, default=AUDIT_PAGE, min_value=1, max_value=AUDIT_PAGE_MAX
    )


class AuditRow(serializers.Serializer[Any]):
    """One change to the tenant, one of its keys, quota rules or prices. An operator is named
    only as such; a key by its prefix. The operator's address is not shown."""

    id = serializers.IntegerField()
    at = serializers.DateTimeField()
    action = serializers.CharField()
    model = serializers.CharField()
    object_id = serializers.CharField()
    object_repr = serializers.CharField()
    actor_kind = serializers.CharField()
    actor = serializers.SerializerMethodField()
    changes = serializers.DictField(help_text="{field: [before, after]}; secrets redacted.")

    def get_actor(self, entry: Any) -> str:
        return "operator" if entry.actor_kind == "user" else str(entry.actor)


class AuditList(serializers.Serializer[Any]):
    tenant = serializers.CharField()
    data = AuditRow(many=True)  # type: ignore[assignment]  # a field named like the base's property
    next_before = serializers.IntegerField(
        allow_null=True, help_text="Pass as `before` for the next page; null: no more."
    )
