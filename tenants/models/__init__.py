"""The tenancy models; import them from here."""

from tenants.models.backends import Backend, BackendKind, ModelRoute
from tenants.models.config_changes import ConfigChanges, config_changes
from tenants.models.fairshare import CostUnitChoice, FairSharePolicy, ModelTokenWeights
from tenants.models.keys import APP_TYPE_BAND, ApiKey, AppType
from tenants.models.rules import CostRule, Metric, QuotaRule, Window
from tenants.models.tenants import Tenant
from tenants.models.tiers import Band, OverBudget, Tier
from tenants.models.usage import UsageRecord, UsageStatus
from tenants.models.usage_daily import UsageDaily

__all__ = [
    "APP_TYPE_BAND",
    "ApiKey",
    "AppType",
    "Backend",
    "BackendKind",
    "Band",
    "ConfigChanges",
    "CostRule",
    "CostUnitChoice",
    "FairSharePolicy",
    "Metric",
    "ModelRoute",
    "ModelTokenWeights",
    "OverBudget",
    "QuotaRule",
    "Tenant",
    "Tier",
    "UsageDaily",
    "UsageRecord",
    "UsageStatus",
    "Window",
    "config_changes",
]
