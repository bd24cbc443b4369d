"""The gateway's own usage pruning: every hour, records past `USAGE_RETENTION_DAYS` are deleted,
so retention holds at the defaults without a timer an operator must remember; so are the
Responses API's kept responses past `RESPONSES_RETENTION_DAYS`.

`prune_once` deletes in batches, one worker-thread trip each (tenants/retention.py), until a
batch comes back short; `run` repeats it. Each process of a deployment prunes: the batches are
idempotent and, on PostgreSQL, skip each other's rows. The first pass waits a minute, so a
gateway that restarts often does not prune at every start, and tests that start one never do.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from datetime import datetime

from django.utils import timezone

from llmserver.runtime.db import run_db
from tenants.retention import BATCH, check, cutoff, prune_batch, prune_responses

log = logging.getLogger(__name__)

FIRST_DELAY = 60.0
INTERVAL = 3600.0


class UsagePruner:
    def __init__(self, days: int, now: Callable[[], datetime] = timezone.now) -> None:
        self.days, self.now = days, now

    async def prune_once(self) -> int:
        """Delete every record past the retention; returns how many."""
        await run_db(check, self.days)
        before, deleted = cutoff(self.now(), self.days), 0
        while True:
            n = await run_db(prune_batch, before, BATCH)
            deleted += n
            if n < BATCH:
                break
        if deleted:
            log.info("pruned %d usage records queued before %s", deleted, before.isoformat())
        responses = await run_db(prune_responses, self.now())
        if responses:
            log.info("pruned %d kept responses past their retention", responses)
        return deleted

    async def run(self) -> None:
        await asyncio.sleep(FIRST_DELAY)
        while True:
            try:
                await self.prune_once()
            except Exception:  # the database away or the trigger missing: try again later
                log.exception("usage pruning failed")
            await asyncio.sleep(INTERVAL)
