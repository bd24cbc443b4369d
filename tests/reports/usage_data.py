"""A fixed usage data set with hand-computed aggregates, shared by report and API tests.

Prices: llama costs 1/2 per million (input/output) until 2025-03-02 00:00 UTC, then 3/6; every
other model falls back to the `*` price of 0.5/1. Range under test: 2025-03-01 .. 2025-03-03.

| id | tenant | user    | model   | queued (UTC)     | in/out        | status   | band | wait | ttft | cost  |
|----|--------|---------|---------|------------------|---------------|----------|------|------|------|-------|
| r0 | acme   | alice   | llama   | 02-28 23:59:59   | 1000/1000     | ok       | 0    | 1    | 2    | 0.003 |
| r1 | acme   | alice   | llama   | 03-01 10:00      | 1000/500      | ok       | 0    | 1    | 2    | 0.002 |
| r2 | acme   | bob     | llama   | 03-01 23:30      | 2000/1000     | ok       | 0    | 3    | 5    | 0.004 |
| r3 | acme   | alice   | mistral | 03-02 09:00      | 4000/2000     | ok       | 2    | 10   | 12   | 0.004 |
| r4 | acme   | alice   | llama   | 03-02 12:00      | 1000/500      | ok       | 0    | 2    | 4    | 0.006 |
| r5 | acme   | bob     | llama   | 03-03 08:00      | 0/0           | error    | 0    | 1    | -    | 0     |
| r6 | acme   | alice   | llama   | 03-03 09:00      | 0/0           | rejected | 0    | -    | -    | 0     |
| r7 | globex | charlie | llama   | 03-02 15:00      | 10000/10000   | ok       | 0    | 4    | 6    | 0.09  |
| r8 | acme   | alice   | llama   | 03-04 00:00      | 1000/1000     | ok       | 0    | 1    | 2    | 0.009 |
"""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

from tenants.models import ApiKey, CostRule, Tenant, UsageRecord

START, END = date(2025, 3, 1), date(2025, 3, 3)

ROWS: list[tuple[Any, ...]] = [
    ("r0", "acme", "alice", "llama", (2, 28, 23, 59, 59), 1000, 1000, "ok", 0, 1, 2),
    ("r1", "acme", "alice", "llama", (3, 1, 10, 0, 0), 1000, 500, "ok", 0, 1, 2),
    ("r2", "acme", "bob", "llama", (3, 1, 23, 30, 0), 2000, 1000, "ok", 0, 3, 5),
    ("r3", "acme", "alice", "mistral", (3, 2, 9, 0, 0), 4000, 2000, "ok", 2, 10, 12),
    ("r4", "acme", "alice", "llama", (3, 2, 12, 0, 0), 1000, 500, "ok", 0, 2, 4),
    ("r5", "acme", "bob", "llama", (3, 3, 8, 0, 0), 0, 0, "error", 0, 1, None),
    ("r6", "acme", "alice", "llama", (3, 3, 9, 0, 0), 0, 0, "rejected", 0, None, None),
    ("r7", "globex", "charlie", "llama", (3, 2, 15, 0, 0), 10000, 10000, "ok", 0, 4, 6),
    ("r8", "acme", "alice", "llama", (3, 4, 0, 0, 0), 1000, 1000, "ok", 0, 1, 2),
]


def at(month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0) -> datetime:
    return datetime(2025, month, day, hour, minute, second, tzinfo=UTC)


def prices() -> None:
    CostRule.objects.create(
        model="llama", input_per_million=1, output_per_million=2, effective_from=at(1, 1)
    )
    CostRule.objects.create(
        model="llama", input_per_million=3, output_per_million=6, effective_from=at(3, 2)
    )
    CostRule.objects.create(
        model="*", input_per_million="0.5", output_per_million=1, effective_from=at(1, 1)
    )


def record(
    request_id: str,
    tenant: Tenant,
    user: str,
    model: str,
    queued_at: datetime,
    prompt: int = 0,
    completion: int = 0,
    status: str = "ok",
    band: int = 0,
    wait: float | None = 1.0,
    ttft: float | None = 2.0,
    api_key: ApiKey | None = None,
    endpoint: str = "chat",
    error_type: str = "",
) -> UsageRecord:
    """One usage row priced as the usage writer prices it: at the time it was queued."""
    rule = CostRule.objects.price_at(model, queued_at)
    cost = rule.cost(prompt, completion) if rule else Decimal(0)
    return UsageRecord.objects.create(
        request_id=request_id,
        tenant=tenant,
        api_key=api_key,
        user=user,
        model=model,
        band=band,
        tier="t",
        queued_at=queued_at,
        dispatched_at=queued_at + timedelta(seconds=wait) if wait is not None else None,
        first_token_at=queued_at + timedelta(seconds=ttft) if ttft is not None else None,
        finished_at=queued_at + timedelta(seconds=20),
        prompt_tokens=prompt,
        completion_tokens=completion,
        cost=cost,
        status=status,
        endpoint=endpoint,
        error_type=error_type,
    )


def load(cast: Any) -> None:
    """The table above, against the shared cast (acme: alice, bob; globex: charlie)."""
    prices()
    tenants = {"acme": cast.acme, "globex": cast.globex}
    keys = {"alice": cast.alice, "bob": cast.bob, "charlie": cast.charlie}
    for rid, tenant, user, model, when, p, c, status, band, wait, ttft in ROWS:
        record(
            rid, tenants[tenant], user, model, at(*when), p, c, status, band, wait, ttft, keys[user]
        )
