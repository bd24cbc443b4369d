"""A counter the database raises itself on every write to the gateway's configuration.

Gateways hold their configuration and the keys they have seen in memory. A key revoked or
deleted, a tenant deactivated, a tier, price, route or backend edited, a member's role changed: any of these, by any
process or tool (the admin, a management command, another gateway, a SQL shell), raises `count`,
because triggers on the configuration's tables do it, not Django's signals, which only the
saving process hears. A gateway reads this one row twice a second and reloads when the count
moved: when nothing changed that is one primary-key read, however many keys it holds.
`ApiKey.last_used_at`, written by every usage flush, is left out on purpose.

The triggers are (re)installed after every `migrate` (`install_triggers`, from
`tenants.apps`), not by one migration: SQLite drops a table's triggers whenever a migration
rebuilds the table, as adding a column with a default does. SQLite and PostgreSQL.
"""

from __future__ import annotations

from django.apps.registry import Apps
from django.db import connections, models

from tenants.models.backends import Backend, ModelRoute
from tenants.models.fairshare import FairSharePolicy, ModelTokenWeights
from tenants.models.keys import ApiKey
from tenants.models.members import Membership
from tenants.models.rules import CostRule, QuotaRule
from tenants.models.tenants import Tenant
from tenants.models.tiers import Tier

ROW = 1
CONFIG_MODELS: tuple[type[models.Model], ...] = (
    ApiKey,
    Backend,
    CostRule,
    FairSharePolicy,
    Membership,  # a role is what an administrator's keys see (`tenants/visibility.py`)
    ModelRoute,
    ModelTokenWeights,
    QuotaRule,
    Tenant,
    Tier,
)
# Columns whose writes are use, not configuration.
NOT_CONFIGURATION = {(ApiKey, "last_used_at")}
EVENTS = ("INSERT", "UPDATE", "DELETE")


class ConfigChanges(models.Model):
    count = models.BigIntegerField(default=0)

    class Meta:
        verbose_name = "configuration change counter"


def config_changes() -> int:
    """The current count (0 before the first change)."""
    connection = connections["default"]
    if connection.vendor == "sqlite" and "mode=memory" in str(connection.settings_dict["NAME"]):
        # An in-memory database (the test suite's) shares one cache between its connections,
        # where a read locks the table and a writer fails at once instead of waiting: this
        # read, twice a second, would fail other connections' changes now and then.
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA read_uncommitted = 1")
    count = ConfigChanges.objects.filter(pk=ROW).values_list("count", flat=True).first()
    return int(count or 0)


def _update_of(model: type[models.Model], state: type[models.Model]) -> str:
    """`UPDATE`, or `UPDATE OF <the configuration's columns>` where some are use; the columns
    are those of `state`, the model as the database has it now (after migrating back, a
    column the code knows may not be there yet)."""
    if not any(m is model for m, _ in NOT_CONFIGURATION):
        return "UPDATE"
    skip = {name for m, name in NOT_CONFIGURATION if m is model}
    columns = [f.column for f in state._meta.concrete_fields if f.name not in skip]
    return "UPDATE OF " + ", ".join(f'"{c}"' for c in columns)


def install_triggers(using: str = "default", apps: Apps | None = None) -> None:
    """Create, or create again, the triggers that count every write to the configuration;
    `apps`, the migrated state, when called after a migrate."""
    connection = connections[using]
    vendor = connection.vendor
    if vendor not in ("sqlite", "postgresql"):
        raise RuntimeError(f"no configuration change triggers are written for {vendor}")
    counter = ConfigChanges._meta.db_table
    bump = (
        f"INSERT INTO {counter} (id, count) VALUES ({ROW}, 1) "
        f"ON CONFLICT (id) DO UPDATE SET count = {counter}.count + 1"
    )
    with connection.cursor() as cursor:
        if vendor == "postgresql":
            cursor.execute(
                "CREATE OR REPLACE FUNCTION count_config_change() RETURNS trigger AS $$ "
                f"BEGIN {bump}; RETURN NULL; END; $$ LANGUAGE plpgsql"
            )
        for model in CONFIG_MODELS:
            table = model._meta.db_table
            try:
                state = apps.get_model(model._meta.label) if apps is not None else model
            except LookupError:  # migrated back to before its table
                continue
            for event in EVENTS:
                name = f"{table}_{event.lower()}_counts"
                when = _update_of(model, state) if event == "UPDATE" else event
                if vendor == "postgresql":
                    cursor.execute(f"DROP TRIGGER IF EXISTS {name} ON {table}")
                    cursor.execute(
                        f"CREATE TRIGGER {name} AFTER {when} ON {table} "
                        "FOR EACH STATEMENT EXECUTE FUNCTION count_config_change()"
                    )
                else:
                    cursor.execute(f"DROP TRIGGER IF EXISTS {name}")
                    cursor.execute(
                        f"CREATE TRIGGER {name} AFTER {when} ON {table} BEGIN {bump}; END"
                    )
