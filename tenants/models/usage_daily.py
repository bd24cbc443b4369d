"""Daily usage sums: every usage record ever written, added to its day as it is inserted.

One row per UTC day, tenant, key, user, model, band, status, endpoint and error type. A trigger
on `UsageRecord` adds each inserted record to its row in the same transaction as the insert, so
the sums are exact by construction: no record is counted twice or missed, whatever crashes,
whoever inserts (the usage writer, a test, a SQL shell). Reports, budgets and day-or-longer quota
windows read these rows; pruning (tenants/retention.py) only deletes old records, whose sums stay
here. Latency percentiles cannot be summed, so they come from the records still kept. Only
inserts are summed: records are the bill and are never changed (`UsageRecord.save` refuses),
so an UPDATE of a record's summed columns by hand would leave its day's sums as they were.

The trigger is (re)installed after every `migrate`, like the configuration's (config_changes.py:
SQLite drops a table's triggers when a migration rebuilds it), in one transaction so an insert
never slips between dropping and creating it. SQLite and PostgreSQL.
"""

from __future__ import annotations

from django.db import connections, models, transaction

from tenants.endpoints import Endpoint
from tenants.models.tenants import Tenant
from tenants.models.tiers import Band
from tenants.models.usage import UsageRecord, UsageStatus

TRIGGER = "usage_daily_add"
KEY = ("day", "tenant_id", "key_id", "user", "model", "band", "status", "endpoint", "error_type")
SUMS = ("requests", "prompt_tokens", "completion_tokens", "cost")


class UsageDaily(models.Model):
    day = models.DateField()
    tenant = models.ForeignKey(Tenant, on_delete=models.PROTECT, related_name="usage_daily")
    # The key's id when the requests were made (0: none). Not a foreign key: a deleted key's
    # history stays summed under its id, and a NULL would defeat the unique row the trigger adds to.
    key_id = models.BigIntegerField(default=0)
    user = models.CharField(max_length=128)
    model = models.CharField(max_length=128)
    band = models.IntegerField(choices=Band.choices)
    status = models.CharField(max_length=10, choices=UsageStatus.choices)
    endpoint = models.CharField(
        max_length=16, choices=[(e.value, e.value) for e in Endpoint], default=Endpoint.CHAT.value
    )
    error_type = models.CharField(max_length=64, blank=True, default="")
    requests = models.PositiveIntegerField(default=0)
    prompt_tokens = models.PositiveBigIntegerField(default=0)
    completion_tokens = models.PositiveBigIntegerField(default=0)
    cost = models.DecimalField(max_digits=20, decimal_places=8, default=0)

    class Meta:
        ordering = ["-day", "tenant", "user", "model"]
        verbose_name = "daily usage"
        verbose_name_plural = "daily usage"
        constraints = [
            # Leads with the day: the all-tenant reports' range scan.
            models.UniqueConstraint(fields=list(KEY), name="one_usage_daily_row")
        ]
        indexes = [
            models.Index(fields=["tenant", "day"], name="usage_daily_tenant_day"),
            models.Index(fields=["key_id", "day"], name="usage_daily_key_day"),
        ]

    def __str__(self) -> str:
        return f"{self.day} {self.tenant_id} {self.user} {self.model} {self.status}"


def _columns(using: str) -> tuple[str, str, str]:
    """The daily table, its key's columns and its sums' columns, quoted."""
    quote = connections[using].ops.quote_name
    return (
        quote(UsageDaily._meta.db_table),
        ", ".join(quote(c) for c in KEY),
        ", ".join(quote(c) for c in SUMS),
    )


def _add_sums(using: str) -> str:
    daily, key, _ = _columns(using)
    quote = connections[using].ops.quote_name
    adds = ", ".join(f"{quote(c)} = {daily}.{quote(c)} + excluded.{quote(c)}" for c in SUMS)
    return f"ON CONFLICT ({key}) DO UPDATE SET {adds}"


def roll_up_sql(source: str, using: str = "default") -> str:
    """Add every record of `source` (a table of UsageRecord's columns) to its daily row: one
    grouped INSERT, in the key's order so concurrent writers lock rows in one order."""
    daily, key, sums = _columns(using)
    day = (
        "(queued_at AT TIME ZONE 'UTC')::date"
        if connections[using].vendor == "postgresql"
        else "date(queued_at)"  # SQLite keeps datetimes as UTC text
    )
    groups = ", ".join(str(i) for i in range(1, len(KEY) + 1))
    # `WHERE true`: SQLite's grammar needs it before an upsert's ON CONFLICT after a SELECT.
    return (
        f"INSERT INTO {daily} ({key}, {sums}) "
        f'SELECT {day}, tenant_id, COALESCE(api_key_id, 0), "user", model, band, status, '
        "endpoint, error_type, COUNT(*), SUM(prompt_tokens), SUM(completion_tokens), SUM(cost) "
        f"FROM {source} WHERE true GROUP BY {groups} ORDER BY {groups} {_add_sums(using)}"
    )


def install_rollup_trigger(using: str = "default") -> None:
    """Create, or create again, the trigger that adds every inserted record to its day."""
    connection = connections[using]
    records = connection.ops.quote_name(UsageRecord._meta.db_table)
    daily, key, sums = _columns(using)
    with transaction.atomic(using=using), connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            # Once per statement over its new rows: a batch of 500 records is one upsert.
            cursor.execute(
                f"CREATE OR REPLACE FUNCTION {TRIGGER}() RETURNS trigger AS $$ BEGIN "
                f"{roll_up_sql('new_rows', using)}; RETURN NULL; END; $$ LANGUAGE plpgsql"
            )
            cursor.execute(f"DROP TRIGGER IF EXISTS {TRIGGER} ON {records}")
            cursor.execute(
                f"CREATE TRIGGER {TRIGGER} AFTER INSERT ON {records} "
                f"REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION {TRIGGER}()"
            )
        elif connection.vendor == "sqlite":
            cursor.execute(f"DROP TRIGGER IF EXISTS {TRIGGER}")
            cursor.execute(
                f"CREATE TRIGGER {TRIGGER} AFTER INSERT ON {records} BEGIN "
                f"INSERT INTO {daily} ({key}, {sums}) VALUES (date(NEW.queued_at), "
                'NEW.tenant_id, COALESCE(NEW.api_key_id, 0), NEW."user", NEW.model, NEW.band, '
                "NEW.status, NEW.endpoint, NEW.error_type, 1, NEW.prompt_tokens, "
                f"NEW.completion_tokens, NEW.cost) {_add_sums(using)}; END"
            )
        else:
            raise RuntimeError(f"no usage roll-up trigger is written for {connection.vendor}")


def drop_rollup_trigger(using: str = "default") -> None:
    """Stop summing inserts (migrating back past the daily rows' key and error columns)."""
    connection = connections[using]
    on = f" ON {connection.ops.quote_name(UsageRecord._meta.db_table)}"
    with connection.cursor() as cursor:
        cursor.execute(
            f"DROP TRIGGER IF EXISTS {TRIGGER}" + (on if connection.vendor == "postgresql" else "")
        )


def rollup_trigger_installed(using: str = "default") -> bool:
    """Whether inserts are being summed: pruning deletes nothing without it."""
    connection = connections[using]
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT 1 FROM pg_trigger WHERE tgname = %s AND NOT tgisinternal "
                "AND tgenabled <> 'D' AND tgrelid = %s::regclass",
                [TRIGGER, UsageRecord._meta.db_table],
            )
        else:
            cursor.execute(
                "SELECT 1 FROM sqlite_master WHERE type = 'trigger' AND name = %s", [TRIGGER]
            )
        return cursor.fetchone() is not None
