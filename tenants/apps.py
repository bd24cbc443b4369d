from __future__ import annotations

from typing import Any

from django.apps import AppConfig
from django.db.models.signals import post_migrate


def _install_triggers(using: str = "default", **kwargs: Any) -> None:
    from tenants.models.config_changes import install_triggers

    install_triggers(using)


class TenantsConfig(AppConfig):
    name = "tenants"
    verbose_name = "Tenants and usage"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        # After every migrate: a migration that rebuilds a table on SQLite drops its triggers.
        post_migrate.connect(_install_triggers, sender=self)
