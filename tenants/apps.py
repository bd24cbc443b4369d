from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.apps.registry import Apps
from django.core.exceptions import FieldDoesNotExist
from django.db.models.signals import post_migrate


def _install_triggers(using: str = "default", apps: Apps | None = None, **kwargs: Any) -> None:
    from tenants.models.config_changes import install_triggers
    from tenants.models.usage_daily import install_rollup_trigger

    install_triggers(using, apps)
    if apps is not None:  # not after migrating back past 0022, whose columns it writes
        try:
            apps.get_model("tenants", "UsageDaily")._meta.get_field("key_id")
        except (LookupError, FieldDoesNotExist):
            return
    install_rollup_trigger(using)


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Tenants and usage"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # After every migrate: a migration that rebuilds a table on SQLite drops its triggers.
        post_migrate.connect(_install_triggers, sender=self)
