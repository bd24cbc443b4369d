"""The database counts every write to the gateway's configuration itself (triggers), whoever
writes; a key's use is not a change."""

from __future__ import annotations

from django.core.management import call_command
from django.db import connection
from django.utils import timezone

from tenants.models import ApiKey, Backend, Tier, config_changes
from tenants.models.config_changes import CONFIG_MODELS, EVENTS


def trigger_names() -> set[str]:
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute("SELECT tgname FROM pg_trigger WHERE NOT tgisinternal")
        else:
            cursor.execute("SELECT name FROM sqlite_master WHERE type = 'trigger'")
        return {row[0] for row in cursor.fetchall()}


def test_every_configuration_table_has_its_triggers_after_migrations(db):
    expected = {
        f"{model._meta.db_table}_{event.lower()}_counts"
        for model in CONFIG_MODELS
        for event in EVENTS
    }
    assert expected <= trigger_names()


def test_a_migration_that_rebuilds_a_table_keeps_its_triggers(transactional_db):
    """On SQLite, adding a column with a default rebuilds the table without its triggers;
    migrating (back and forth) installs them again."""
    call_command("migrate", "tenants", "0013", verbosity=0)
    call_command("migrate", "tenants", verbosity=0)
    assert "tenants_backend_update_counts" in trigger_names()


def test_a_revocation_without_signals_is_counted(cast):
    before = config_changes()
    ApiKey.objects.filter(pk=cast.alice.pk).update(revoked=True)
    assert config_changes() == before + 1


def test_a_keys_use_is_not_counted(cast):
    before = config_changes()
    ApiKey.objects.filter(pk=cast.alice.pk).update(last_used_at=timezone.now())
    assert config_changes() == before


def test_edits_and_deletions_are_counted(cast):
    before = config_changes()
    Tier.objects.filter(pk=cast.interactive.pk).update(weight=2.0)
    Backend.objects.create(name="extra", base_url="http://127.0.0.1:1")
    ApiKey.objects.filter(pk=cast.charlie.pk).delete()
    assert config_changes() == before + 3
