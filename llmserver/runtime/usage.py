"""Usage records, written off the request path in batches.

The request path only appends a draft to a list; `flush_once` prices the batch with the cost rule
in force when each request was queued (one query for the rules of the batch's models) and
inserts it with one multi-row INSERT, then touches `last_used_at` of the keys it saw, all on a
worker thread in one transaction. `run` repeats the step; the gateway calls `flush_once` once
more on shutdown.

Usage is the bill, so one bad record must not stop it for everyone: every string is clipped to
its column and made storable when a draft becomes a record; a batch that still fails is split in
halves until the bad row stands alone, and that row is logged, counted in `failed` and dropped.
Only an unreachable database keeps a batch pending, to be tried again at the next flush.
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from functools import cache
from typing import Any

from django.db import (
    DEFAULT_DB_ALIAS,
    InterfaceError,
    OperationalError,
    connections,
    transaction,
)
from django.db.models import DateTimeField, DecimalField, Field

from llmserver.runtime.db import run_db
from tenants.budget import cache as spend_cache
from tenants.endpoints import Endpoint
from tenants.models import ApiKey, CostRule, UsageRecord, UsageStatus
from tenants.models.rules import rule_in_force

log = logging.getLogger(__name__)
# Errors that say the database is unreachable or busy, not that a row is bad.
UNREACHABLE = (OperationalError, InterfaceError)
# NUL cannot be stored by PostgreSQL; a lone surrogate cannot be encoded as UTF-8 at all.
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


@dataclass(slots=True)
class UsageDraft:
    request_id: str
    tenant_id: int
    tenant_slug: str
    api_key_id: int | None
    user: str
    model: str
    tier: str
    band: int
    queued_at: datetime
    backend: str = ""
    dispatched_at: datetime | None = None
    first_token_at: datetime | None = None
    finished_at: datetime | None = None
    prompt_tokens: int = 0
    completion_tokens: int = 0
    status: UsageStatus = UsageStatus.OK
    error_type: str = ""
    endpoint: str = Endpoint.CHAT


def storable(value: str, width: int) -> str:
    """`value` as the column can hold it: unstorable characters replaced, clipped to `width`.
    The API refuses such values at the edge; this is the last line of defence."""
    return _UNSTORABLE.sub("\ufffd", value)[:width]


def _fit(name: str, value: str) -> str:
    """`value` made storable in UsageRecord's column `name`."""
    width: int | None = getattr(UsageRecord._meta.get_field(name), "max_length", None)
    return storable(value, width if width is not None else len(value))


def price(drafts: list[UsageDraft]) -> list[UsageRecord]:
    """Turn drafts into records, each priced at the rule in force at its queue time."""
    models = [_fit("model", d.model) for d in drafts]
    rules: dict[str, list[CostRule]] = {}
    for known in CostRule.objects.filter(model__in={*models, "*"}):
        rules.setdefault(known.model, []).append(known)
    records = []
    for d, model in zip(drafts, models, strict=True):
        rule = rule_in_force(
            [*rules.get(model, ()), *rules.get("*", ())], model, d.queued_at, d.tenant_id
        )
        cost = rule.cost(d.prompt_tokens, d.completion_tokens) if rule else Decimal(0)
        records.append(
            UsageRecord(
                request_id=_fit("request_id", d.request_id),
                tenant_id=d.tenant_id,
                api_key_id=d.api_key_id,
                user=_fit("user", d.user),
                model=model,
                backend=_fit("backend", d.backend),
                tier=_fit("tier", d.tier),
                band=d.band,
                queued_at=d.queued_at,
                dispatched_at=d.dispatched_at,
                first_token_at=d.first_token_at,
                finished_at=d.finished_at or d.queued_at,
                prompt_tokens=d.prompt_tokens,
                completion_tokens=d.completion_tokens,
                cost=cost,
                status=d.status,
                error_type=_fit("error_type", d.error_type),
                endpoint=d.endpoint,
            )
        )
    return records


@cache
def _insert_fields() -> tuple[tuple[Field[Any, Any], bool], ...]:
    """The columns of an insert, each with whether its value needs Django's adaptation: a
    record's strings and integers are what every database takes as they are; its datetimes and
    its decimal cost are not (SQLite stores them as text)."""
    return tuple(
        (f, isinstance(f, DateTimeField | DecimalField))
        for f in UsageRecord._meta.concrete_fields
        if not f.primary_key
    )


def insert(records: list[UsageRecord]) -> None:
    """One multi-row INSERT for the batch (several only where the database caps the parameters
    of one statement: SQLite's 999, about 58 rows). Django's bulk_create compiles every value's
    placeholder and adapts every value through its field, on the GIL the event loop needs: the
    whole `write` took about 56 us a row that way on SQLite, about 35 us this way."""
    if not records:
        return
    db = connections[DEFAULT_DB_ALIAS]  # the thread's own wrapper, not the proxy, per value
    fields = _insert_fields()
    quote = db.ops.quote_name
    columns = ", ".join(quote(str(f.column)) for f, _ in fields)
    head = f"INSERT INTO {quote(UsageRecord._meta.db_table)} ({columns}) VALUES "
    row = "(" + ", ".join(["%s"] * len(fields)) + ")"
    cap = db.features.max_query_params
    per = max(1, cap // len(fields)) if cap else len(records)
    with db.cursor() as cursor:
        for start in range(0, len(records), per):
            chunk = records[start : start + per]
            params = [
                f.get_db_prep_save(value, db) if adapt and value is not None else value
                for r in chunk
                for f, adapt in fields
                for value in (getattr(r, f.attname),)
            ]
            cursor.execute(head + ", ".join([row] * len(chunk)), params)


def write(drafts: list[UsageDraft]) -> list[UsageRecord]:
    """One transaction per batch: one commit (an fsync on SQLite) instead of one per statement.
    No conflict is ignored: a duplicate request id fails the batch like any bad row would.
    Returns the rows written, in the order of `drafts`."""
    records = price(drafts)
    last_used: dict[int, datetime] = {}
    for d in drafts:
        if d.api_key_id is not None:
            stamp = d.finished_at or d.queued_at
            last_used[d.api_key_id] = max(stamp, last_used.get(d.api_key_id, stamp))
    with transaction.atomic():
        _forget_deleted_keys(records)
        insert(records)
        # In id order: two processes' batches then lock the keys' rows in one order.
        for key_id, stamp in sorted(last_used.items()):
            ApiKey.objects.filter(pk=key_id).update(last_used_at=stamp)
    for r in records:
        if r.cost:
            spend_cache.add(r.tenant_id, r.api_key_id, r.queued_at, r.cost)
    return records


def _forget_deleted_keys(records: list[UsageRecord]) -> None:
    """A key deleted while its requests ran: their rows are still the bill (tenant, user,
    tokens, cost), kept without the key instead of refused by its foreign key."""
    wanted = {r.api_key_id for r in records if r.api_key_id is not None}
    if not wanted:
        return
    live = set(ApiKey.objects.filter(pk__in=wanted).values_list("pk", flat=True))
    for record in records:
        if record.api_key_id not in live:
            record.api_key_id = None


class UsageWriter:
    def __init__(
        self,
        interval: float = 1.0,
        batch_size: int = 500,
        on_settled: Callable[[list[str]], Awaitable[None]] | None = None,
    ) -> None:
        """`on_settled(request_ids)` is told of each row written or dropped (the admission
        reservations end there)."""
        self.interval = interval
        self.batch_size = batch_size
        self._on_settled = on_settled
        self._pending: list[UsageDraft] = []
        self._lock = asyncio.Lock()
        self.written = 0
        self.failed = 0
        # The cost of the rows written, per tenant slug (the tenants of real keys: a bounded
        # label set), exactly as billed: `/metrics` exports it as llmserver_cost_total.
        self.cost_by_tenant: dict[str, Decimal] = {}

    def add(self, draft: UsageDraft) -> None:
        self._pending.append(draft)

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def flush_once(self) -> int:
        """Write everything pending, in batches. A batch the database cannot take because it is
        unreachable stays pending for the next flush; a bad row never holds up the others."""
        async with self._lock:
            before = self.written
            try:
                while self._pending:
                    await self._write_head(self._pending[: self.batch_size])
            except UNREACHABLE:
                log.exception("the database is unreachable; %d usage records wait", self.pending)
            return self.written - before

    async def _write_head(self, batch: list[UsageDraft]) -> None:
        """Write `batch`, the head of the queue, and take it off the queue. On a failure other
        than an unreachable database, split it in halves; a single row that fails is dropped."""
        try:
            records = await run_db(write, batch)
            self.written += len(records)
            for draft, record in zip(batch, records, strict=True):
                slug = draft.tenant_slug
                self.cost_by_tenant[slug] = self.cost_by_tenant.get(slug, Decimal(0)) + record.cost
        except UNREACHABLE:
            raise
        except Exception:
            if len(batch) > 1:
                log.warning("writing %d usage records failed; splitting the batch", len(batch))
                half = len(batch) // 2
                await self._write_head(batch[:half])
                await self._write_head(batch[half:])
                return
            self.failed += 1
            log.exception("usage record %s cannot be written; dropped", batch[0].request_id)
        del self._pending[: len(batch)]
        if self._on_settled is not None:
            try:
                await self._on_settled([d.request_id for d in batch])
            except Exception:
                # The rows are written; a reservation not yet deleted only over-counts until
                # the reservations retry it, and never loses a row.
                log.exception("releasing the reservations of %d usage records failed", len(batch))

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            # Shielded: cancelling this loop (at shutdown) must not abandon a flush whose write
            # is already committing on its worker thread, or the batch would stay queued and be
            # written twice by the final flush.
            await asyncio.shield(self.flush_once())


__all__ = ["UsageDraft", "UsageWriter", "insert", "price", "write"]
