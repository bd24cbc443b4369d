"""Usage records, written off the request path in batches.

The request path only appends a draft to a list; `flush_once` prices the batch with the cost rule
in force when each request was queued (one query for the rules of the batch's models) and
bulk-inserts it, then touches `last_used_at` of the keys it saw. `run` repeats the step; the
gateway calls `flush_once` once more on shutdown.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db import InterfaceError, OperationalError, transaction

from llmserver.runtime.db import run_db
from tenants.models import ApiKey, CostRule, UsageRecord, UsageStatus
from tenants.models.rules import rule_in_force

log = logging.getLogger(__name__)


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


def price(drafts: list[UsageDraft]) -> list[UsageRecord]:
    """Turn drafts into records, each priced at the rule in force at its queue time."""
    models = {_text(d.model, 128) for d in drafts} | {"*"}
    rules: dict[str, list[CostRule]] = {}
    for known in CostRule.objects.filter(model__in=models):
        rules.setdefault(known.model, []).append(known)
    records = []
    for d in drafts:
        model = _text(d.model, 128)
        rule = rule_in_force([*rules.get(model, ()), *rules.get("*", ())], model, d.queued_at)
        cost = rule.cost(d.prompt_tokens, d.completion_tokens) if rule else Decimal(0)
        records.append(
            UsageRecord(
                request_id=_text(d.request_id, 64),
                tenant_id=d.tenant_id,
                api_key_id=d.api_key_id,
                user=_text(d.user, 128),
                model=model,
                backend=_text(d.backend, 64),
                tier=_text(d.tier, 64),
                band=d.band,
                queued_at=d.queued_at,
                dispatched_at=d.dispatched_at,
                first_token_at=d.first_token_at,
                finished_at=d.finished_at or d.queued_at,
                prompt_tokens=d.prompt_tokens,
                completion_tokens=d.completion_tokens,
                cost=cost,
                status=d.status,
                error_type=_text(d.error_type, 64),
            )
        )
    return records


def _text(value: str, limit: int) -> str:
    """What a column can hold on every database: clipped to its length, without NUL (PostgreSQL
    refuses it) or lone surrogates (no encoding takes them). A client's text reaches here."""
    clean = value.encode("utf-8", "replace").decode("utf-8").replace("\x00", "")
    return clean[:limit]


def write(drafts: list[UsageDraft]) -> int:
    """One transaction per batch: one commit (an fsync on SQLite) instead of one per statement."""
    records = price(drafts)
    last_used: dict[int, datetime] = {}
    for d in drafts:
        if d.api_key_id is not None:
            stamp = d.finished_at or d.queued_at
            last_used[d.api_key_id] = max(stamp, last_used.get(d.api_key_id, stamp))
    with transaction.atomic():
        UsageRecord.objects.bulk_create(records, batch_size=500)
        for key_id, stamp in last_used.items():
            ApiKey.objects.filter(pk=key_id).update(last_used_at=stamp)
    return len(records)


class UsageWriter:
    def __init__(self, interval: float = 1.0, batch_size: int = 500) -> None:
        self.interval = interval
        self.batch_size = batch_size
        self._pending: list[UsageDraft] = []
        self._lock = asyncio.Lock()
        self.written = 0
        self.failed = 0

    def add(self, draft: UsageDraft) -> None:
        self._pending.append(draft)

    @property
    def pending(self) -> int:
        return len(self._pending)

    async def flush_once(self) -> int:
        """Write everything pending, in batches. A batch that fails is split in halves until the
        bad rows stand alone; each of those is logged and counted in `failed`, never retried
        forever, so one bad row cannot stop the bill for every tenant."""
        async with self._lock:
            written = 0
            while self._pending:
                batch = self._pending[: self.batch_size]
                del self._pending[: len(batch)]
                try:
                    written += await self._write_splitting(batch)
                except (InterfaceError, OperationalError):
                    break
            self.written += written
            return written

    async def _write_splitting(self, batch: list[UsageDraft]) -> int:
        try:
            return await run_db(write, batch)
        except (InterfaceError, OperationalError):
            # The database is away, not the rows bad: keep them all for the next flush.
            self._pending[:0] = batch
            log.warning("the database is unreachable; %d usage records wait", len(batch))
            raise
        except Exception:
            if len(batch) == 1:
                self.failed += 1
                log.exception("usage record %s cannot be written; dropped", batch[0].request_id)
                return 0
        first, second = batch[: len(batch) // 2], batch[len(batch) // 2 :]
        try:
            written = await self._write_splitting(first)
        except (InterfaceError, OperationalError):
            self._pending[len(first) : len(first)] = second  # after `first`, put back already
            raise
        return written + await self._write_splitting(second)

    async def run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            await self.flush_once()


__all__ = ["UsageDraft", "UsageWriter", "price", "write"]
