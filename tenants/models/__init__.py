"""The tenancy models; import them from here."""

from tenants.models.audit import ActorKind, AuditAction, AuditEntry
from tenants.models.backends import Backend, ModelRoute
from tenants.models.batches import Batch, BatchStatus, FilePurpose, StoredFile
from tenants.models.config_changes import ConfigChanges, config_changes
from tenants.models.fairshare import CostUnitChoice, FairSharePolicy, ModelTokenWeights
from tenants.models.keys import APP_TYPE_BAND, ApiKey, AppType
from tenants.models.members import Membership, Role
from tenants.models.responses import StoredResponse
from tenants.models.rules import CostRule, Metric, QuotaRule, Window
from tenants.models.sso import SsoIdentity
from tenants.models.tenants import Tenant
from tenants.models.tiers import Band, OverBudget, Tier
from tenants.models.usage import UsageRecord, UsageStatus
from tenants.models.usage_daily import UsageDaily

__all__ = [
    "APP_TYPE_BAND",
    "ActorKind",
    "ApiKey",
    "AppType",
    "AuditAction",
    "AuditEntry",
    "Backend",
    "Band",
    "Batch",
    "BatchStatus",
    "ConfigChanges",
    "CostRule",
    "CostUnitChoice",
    "FairSharePolicy",
    "FilePurpose",
    "Membership",
    "Metric",
    "ModelRoute",
    "ModelTokenWeights",
    "OverBudget",
    "QuotaRule",
    "Role",
    "SsoIdentity",
    "StoredFile",
    "StoredResponse",
    "Tenant",
    "Tier",
    "UsageDaily",
    "UsageRecord",
    "UsageStatus",
    "Window",
    "config_changes",
]
