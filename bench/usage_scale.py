"""Usage at a year's scale, on PostgreSQL: the report page, GET /api/v1/usage, the budget check
and the quota check over 10 million usage records spread over a year, before the daily sums
(the code of `--base`, which read the records), with them, and after pruning to the default
retention; and what summing a year and pruning it cost.

It creates its own database (`--db`, dropped at the end unless `--keep`), migrates it, makes
`--tenants` tenants of `--users` users each (one key and one band each, a favourite model and a
second one among eight), and fills the records with one INSERT ... SELECT over generate_series
per million, with the summing trigger off and the secondary indexes dropped (both restored
after), so the fill takes minutes, not hours. Records are skewed towards a few heavy users; 96%
ok, the rest errors, cancellations and refusals.

The phases, each measured in a fresh process so the code under test is the one imported:
- before: the code at `--base` (a `git archive` of it in a temporary directory), which read
  the records for every report, budget and quota (its daily rows are empty: nothing was rolled);
- summed: this code, once the year is summed (migration 0022's statement, timed) and with every
  record still kept;
- pruned: this code after pruning to `USAGE_RETENTION_DAYS` (the default 90; timed, then VACUUM
  ANALYZE, as autovacuum would).

Each measurement repeats `--reps` times (at most `--budget` seconds each) over tenants in turn:
the admin report page at its default range (30 days, all tenants) rendered by Django's test
client as a superuser; the same for a year; GET /api/v1/usage?group_by=model (this month) and
over 90 days with a tenant's key; `month_spend` (the budget check, uncached); `check_quota_for`
with an hour, a day (per user) and a month rule. Last, the usage writer's 500-row INSERT with the
summing trigger on and off.

    .venv/bin/python bench/usage_scale.py                       # 10 million records
    .venv/bin/python bench/usage_scale.py --records 1000000 --reps 5 --json
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SERVER = "postgres://postgres@127.0.0.1:5432"
MODELS = ["llama-70b", "llama-8b", "mistral", "qwen", "gemma", "phi", "embed", "mixtral"]


def setup(db: str, code: Path) -> None:
    """Django on `db`, importing the project from `code` (not the venv's editable install)."""
    sys.path.insert(0, str(code))
    os.environ["DATABASE_URL"] = f"{SERVER}/{db}"
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmserver.settings")
    os.environ.setdefault("SECRET_KEY", "bench")
    import django

    django.setup()


def admin_sql(statement: str) -> None:
    subprocess.run(
        ["psql", "-q", "-h", "127.0.0.1", "-U", "postgres", "-d", "postgres", "-c", statement],
        check=True,
    )


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[max(int(-(-p * len(ordered) // 100)) - 1, 0)]


def timed(fn: Callable[[int], object], reps: int, budget: float) -> dict[str, Any]:
    """`fn(i)` repeated; ms per call: p50, p95, n. The first call (cold) is not counted."""
    fn(0)
    took: list[float] = []
    started = time.monotonic()
    for i in range(1, reps + 1):
        t0 = time.perf_counter()
        fn(i)
        took.append((time.perf_counter() - t0) * 1000)
        if time.monotonic() - started > budget:
            break
    return {"p50": statistics.median(took), "p95": percentile(took, 95), "n": len(took)}


# -- the fill ----------------------------------------------------------------------------------


def make_world(tenants: int, users: int) -> dict[str, Any]:
    from django.contrib.auth import get_user_model

    from tenants.models import ApiKey, AppType, Band, QuotaRule, Tenant, Tier

    tier = Tier.objects.create(name="standard", band=Band.STANDARD)
    people: list[tuple[int, int, int, str, int, str, str]] = []
    secrets: dict[int, str] = {}
    for t in range(tenants):
        tenant = Tenant.objects.create(
            name=f"Tenant {t}", slug=f"t{t}", default_tier=tier, monthly_budget=1000
        )
        QuotaRule.objects.create(tenant=tenant, window="hour", metric="requests", limit=10**6)
        QuotaRule.objects.create(
            tenant=tenant, window="day", metric="tokens", limit=10**9, per_user=True
        )
        QuotaRule.objects.create(tenant=tenant, window="month", metric="cost", limit=10**6)
        for u in range(users):
            key, secret = ApiKey.objects.create_key(
                tenant=tenant, user=f"user{u}", app_type=AppType.API
            )
            n = len(people)
            people.append(
                (n, tenant.pk, key.pk, f"user{u}", n % 3, MODELS[n % 8], MODELS[(n * 5 + 3) % 8])
            )
            if u == 0:
                secrets[tenant.pk] = secret
    get_user_model().objects.create_superuser("bench", "bench@example.com", "bench")
    return {"tier": tier.pk, "people": people, "secrets": secrets}


def fill(records: int, people: list[tuple[Any, ...]], now: datetime) -> float:
    """`records` rows over the year before `now`; returns seconds. Trigger off, indexes rebuilt."""
    from django.db import connection

    start = now - timedelta(days=365)
    step = (365 * 86400 - 60) / records
    n = len(people)
    t0 = time.monotonic()
    with connection.cursor() as c:
        c.execute("SET maintenance_work_mem = '512MB'")
        c.execute(
            "CREATE TEMP TABLE people (u int PRIMARY KEY, tenant_id bigint, key_id bigint, "
            "name text, band int, model1 text, model2 text)"
        )
        c.executemany("INSERT INTO people VALUES (%s, %s, %s, %s, %s, %s, %s)", people)
        c.execute(
            "SELECT indexdef, indexname FROM pg_indexes WHERE tablename = 'tenants_usagerecord' "
            "AND indexname NOT IN (SELECT conname FROM pg_constraint)"
        )
        indexes = c.fetchall()
        for _, name in indexes:
            c.execute(f'DROP INDEX "{name}"')
        c.execute("ALTER TABLE tenants_usagerecord DISABLE TRIGGER usage_daily_add")
        chunk = 1_000_000
        for lo in range(1, records + 1, chunk):
            hi = min(lo + chunk - 1, records)
            c.execute(FILL, {"lo": lo, "hi": hi, "n": n, "start": start, "step": step})
            print(f"  filled {hi:,} records ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
        for definition, _ in indexes:
            c.execute(definition)
        print(f"  indexes rebuilt ({time.monotonic() - t0:.0f} s)", file=sys.stderr)
        c.execute("VACUUM ANALYZE tenants_usagerecord")
    return time.monotonic() - t0


# h: a hash of the row number; the user is skewed towards the low numbers (heavy users).
FILL = """
INSERT INTO tenants_usagerecord (request_id, endpoint, tenant_id, api_key_id, "user", model,
    backend, tier, band, queued_at, dispatched_at, first_token_at, finished_at, prompt_tokens,
    completion_tokens, cost, status, error_type)
SELECT 'b' || g, CASE WHEN h %% 20 = 0 THEN 'embeddings' ELSE 'chat' END, p.tenant_id, p.key_id,
    p.name, CASE WHEN h %% 5 = 0 THEN p.model2 ELSE p.model1 END, 'gpu' || (h %% 4), 'standard',
    p.band, t, t + wait, t + wait + ttft, t + wait + ttft + interval '4 seconds',
    CASE WHEN s.status = 'rejected' THEN 0 ELSE 50 + h %% 3000 END,
    CASE WHEN s.status IN ('rejected', 'error') OR h %% 20 = 0 THEN 0 ELSE h / 7 %% 900 END,
    CASE WHEN s.status = 'rejected' THEN 0
         ELSE ((50 + h %% 3000) * 0.5 + (h / 7 %% 900) * 1.5) / 1000000 END,
    s.status, s.error_type
FROM (
    SELECT g, h, %(start)s::timestamptz + (g - 1) * %(step)s * interval '1 second' AS t,
        ((h %% 1000) * (h / 1000 %% 1000) / 1000 * %(n)s / 1000) AS u,
        (h / 11 %% 2000) * interval '1 millisecond' AS wait,
        (100 + h / 13 %% 900) * interval '1 millisecond' AS ttft, h / 17 %% 1000 AS r
    FROM (SELECT g, (g * 2654435761) %% 4294967296 AS h
          FROM generate_series(%(lo)s::bigint, %(hi)s::bigint) AS g) AS numbers
) AS x
JOIN people AS p ON p.u = x.u
CROSS JOIN LATERAL (SELECT
    CASE WHEN r < 960 THEN 'ok' WHEN r < 975 THEN 'error' WHEN r < 985 THEN 'cancelled'
         ELSE 'rejected' END AS status,
    CASE WHEN r < 960 THEN '' WHEN r < 975 THEN 'upstream_error' WHEN r < 985 THEN ''
         WHEN r < 992 THEN 'rate_limit_exceeded' WHEN r < 996 THEN 'quota_exceeded'
         ELSE 'budget_exceeded' END AS error_type) AS s
"""


def sum_year() -> dict[str, float]:
    """Migration 0022's statement over every record, then the trigger back on."""
    from django.db import connection

    from tenants.models.usage_daily import roll_up_sql

    with connection.cursor() as c:
        c.execute("SELECT count(*) FROM tenants_usagerecord")
        (rows,) = c.fetchone()
        t0 = time.monotonic()
        c.execute(roll_up_sql("tenants_usagerecord"))
        seconds = time.monotonic() - t0
        c.execute("ALTER TABLE tenants_usagerecord ENABLE TRIGGER usage_daily_add")
        c.execute("VACUUM ANALYZE tenants_usagedaily")
        c.execute("SELECT count(*) FROM tenants_usagedaily")
        (daily,) = c.fetchone()
    return {"records": rows, "daily_rows": daily, "seconds": seconds, "per_s": rows / seconds}


def prune_default() -> dict[str, float]:
    from django.db import connection
    from django.utils import timezone

    from llmserver.conf import gateway_settings
    from tenants.retention import BATCH, check, cutoff, prune_batch

    days = gateway_settings().usage_retention_days
    check(days)
    before = cutoff(timezone.now(), days)
    t0, deleted, batches, slowest = time.monotonic(), 0, 0, 0.0
    while True:
        b0 = time.monotonic()
        n = prune_batch(before, BATCH)
        slowest = max(slowest, time.monotonic() - b0)
        deleted, batches = deleted + n, batches + 1
        if n < BATCH:
            break
    seconds = time.monotonic() - t0
    with connection.cursor() as c:
        c.execute("VACUUM ANALYZE tenants_usagerecord")
        c.execute("SELECT count(*) FROM tenants_usagerecord")
        (kept,) = c.fetchone()
    return {
        "days": days,
        "deleted": deleted,
        "kept": kept,
        "seconds": seconds,
        "per_s": deleted / seconds,
        "batches": batches,
        "slowest_batch_ms": slowest * 1000,
    }


def insert_cost(batches: int) -> dict[str, float]:
    """µs per row of the usage writer's 500-row INSERT, trigger on and off, alternating."""
    from django.db import connection, transaction
    from django.utils import timezone

    from llmserver.runtime.usage import insert
    from tenants.models import UsageRecord

    template = UsageRecord.objects.order_by("-id").first()
    assert template is not None
    fields = UsageRecord._meta.concrete_fields
    took: dict[str, list[float]] = {"on": [], "off": []}
    for b in range(batches * 2):
        way = "on" if b % 2 else "off"
        rows = []
        for i in range(500):
            r = UsageRecord(**{f.attname: getattr(template, f.attname) for f in fields})
            r.pk, r.request_id, r.queued_at = None, f"ins-{b}-{i}", timezone.now()
            rows.append(r)
        with connection.cursor() as c:
            c.execute(
                f"ALTER TABLE tenants_usagerecord {'ENABLE' if way == 'on' else 'DISABLE'} "
                "TRIGGER usage_daily_add"
            )
        t0 = time.perf_counter()
        with transaction.atomic():
            insert(rows)
        took[way].append((time.perf_counter() - t0) * 1e6 / 500)
    with connection.cursor() as c:
        c.execute("ALTER TABLE tenants_usagerecord ENABLE TRIGGER usage_daily_add")
    return {way: statistics.median(v) for way, v in took.items()}


# -- one phase's measurements (run in its own process) -----------------------------------------


def measure(world: dict[str, Any], reps: int, budget: float) -> dict[str, Any]:
    from django.contrib.auth import get_user_model
    from django.test import Client
    from django.utils import timezone

    from tenants.budget import month_spend
    from tenants.quota import check_quota_for

    now = timezone.now()
    people = world["people"]
    tenant_ids = sorted({p[1] for p in people})
    staff = Client()
    staff.force_login(get_user_model().objects.get(username="bench"))
    year = f"?start={(now - timedelta(days=364)).date()}&end={now.date()}"
    quarter = f"&start={(now - timedelta(days=89)).date()}&end={now.date()}"

    def page(query: str) -> Callable[[int], object]:
        def get(i: int) -> None:
            response = staff.get("/admin/reports/" + query)
            assert response.status_code == 200, response.status_code

        return get

    def api(query: str) -> Callable[[int], object]:
        def get(i: int) -> None:
            tenant = tenant_ids[i % len(tenant_ids)]
            secret = world["secrets"][str(tenant)]
            response = Client().get(
                "/api/v1/usage?group_by=model" + query, HTTP_AUTHORIZATION=f"Bearer {secret}"
            )
            assert response.status_code == 200, response.content

        return get

    def spend(i: int) -> object:
        return month_spend(tenant_ids[i % len(tenant_ids)], now)

    def quota(i: int) -> object:
        p = people[(i * 7919) % len(people)]
        return check_quota_for(p[1], world["tier"], p[3], p[5], now)

    out = {
        "report page, 30 days": timed(page(""), reps, budget),
        "report page, a year": timed(page(year), reps, budget) if world["year"] else None,
        "GET /api/v1/usage, this month": timed(api(""), reps, budget),
        "GET /api/v1/usage, 90 days": timed(api(quarter), reps, budget),
        "budget check (month_spend)": timed(spend, reps * 5, budget),
        "quota check (3 rules)": timed(quota, reps * 5, budget),
    }
    return {k: v for k, v in out.items() if v is not None}


def run_phase(code: Path, db: str, world_file: str, args: argparse.Namespace, year: bool) -> Any:
    env = {**os.environ, "PYTHONPATH": str(code)}
    command = [sys.executable, __file__, "--measure", world_file, "--db", db]
    command += ["--reps", str(args.reps), "--budget", str(args.budget), "--code", str(code)]
    command += ["--year"] if year else []
    done = subprocess.run(command, env=env, check=True, stdout=subprocess.PIPE, text=True)
    return json.loads(done.stdout)


def base_code(commit: str, into: Path) -> Path:
    tar = subprocess.run(
        ["git", "-C", str(ROOT), "archive", commit], check=True, capture_output=True
    ).stdout
    with tarfile.open(fileobj=io.BytesIO(tar)) as archive:
        archive.extractall(into, filter="data")
    return into


def table(phases: dict[str, Any]) -> str:
    names = list(dict.fromkeys(name for results in phases.values() for name in results))
    head = "| ms, p50 / p95 | " + " | ".join(phases) + " |"
    lines = [head, "|---|" + "---:|" * len(phases)]
    for name in names:
        cells = []
        for results in phases.values():
            r = results.get(name)
            cells.append(f"{r['p50']:,.1f} / {r['p95']:,.1f} ({r['n']})" if r else "-")
        lines.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--records", type=int, default=10_000_000)
    parser.add_argument("--tenants", type=int, default=50)
    parser.add_argument("--users", type=int, default=20, help="per tenant")
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--budget", type=float, default=60.0, help="seconds per measurement")
    parser.add_argument("--base", default="6585c14", help="the commit before the daily sums")
    parser.add_argument("--db", default="llms_usage_scale")
    parser.add_argument("--keep", action="store_true", help="do not drop the database")
    parser.add_argument("--json", action="store_true")
    parser.add_argument("--measure", help=argparse.SUPPRESS)
    parser.add_argument("--code", default=str(ROOT), help=argparse.SUPPRESS)
    parser.add_argument("--year", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.db in ("postgres", "test", "template0", "template1"):
        parser.error(f"{args.db} is not this benchmark's to drop")
    if args.measure:
        setup(args.db, Path(args.code))
        world = {**json.loads(Path(args.measure).read_text()), "year": args.year}
        print(json.dumps(measure(world, args.reps, args.budget)))
        return

    admin_sql(f"DROP DATABASE IF EXISTS {args.db}")
    admin_sql(f"CREATE DATABASE {args.db}")
    try:
        setup(args.db, ROOT)
        from django.core.management import call_command
        from django.utils import timezone

        call_command("migrate", verbosity=0)
        world = make_world(args.tenants, args.users)
        filled = fill(args.records, world["people"], timezone.now())
        print(f"filled {args.records:,} records in {filled:.0f} s", file=sys.stderr)
        with tempfile.TemporaryDirectory() as tmp:
            world_file = str(Path(tmp) / "world.json")
            Path(world_file).write_text(json.dumps(world))
            base = base_code(args.base, Path(tmp) / "base")
            phases = {"before (records)": run_phase(base, args.db, world_file, args, False)}
            print("measured before", file=sys.stderr)
            summed = sum_year()
            print(f"summed: {summed}", file=sys.stderr)
            phases["summed, all kept"] = run_phase(ROOT, args.db, world_file, args, True)
            pruned = prune_default()
            print(f"pruned: {pruned}", file=sys.stderr)
            phases["pruned to 90 days"] = run_phase(ROOT, args.db, world_file, args, True)
        inserts = insert_cost(20)
        result = {"phases": phases, "sum": summed, "prune": pruned, "insert_us_per_row": inserts}
        if args.json:
            print(json.dumps(result, indent=2))
        else:
            print(table(phases))
            print(
                f"\nsumming a year (migration 0022): {summed['records']:,} records -> "
                f"{summed['daily_rows']:,} daily rows in {summed['seconds']:.1f} s "
                f"({summed['per_s']:,.0f} records/s)"
            )
            print(
                f"pruning to {pruned['days']} days: {pruned['deleted']:,} deleted in "
                f"{pruned['seconds']:.1f} s ({pruned['per_s']:,.0f} rows/s, {pruned['batches']} "
                f"batches, slowest {pruned['slowest_batch_ms']:.0f} ms), {pruned['kept']:,} kept"
            )
            print(
                f"usage writer INSERT, µs/row: trigger on {inserts['on']:.1f}, "
                f"off {inserts['off']:.1f}"
            )
    finally:
        if not args.keep:
            from django.db import connections

            connections.close_all()
            admin_sql(f"DROP DATABASE IF EXISTS {args.db}")


if __name__ == "__main__":
    main()
