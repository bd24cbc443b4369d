"""One batch, run by the process that holds its claim: validate it, send its lines, end it.

Lines go out `lines_in_flight` at a time, in file order, skipping those already answered (after
a restart). Every `BATCH_POLL_INTERVAL` a heartbeat reports the counts, renews the claim and
reads the status back, which is how a cancel arrives. How a run stops (`Stop`):
- cancelled by its owner: no more lines are sent, those in flight end, then `cancelled`;
- its 24h window ran out: those in flight are cut, every line not answered is recorded as
  `batch_expired`, then `expired`;
- its owner's key can no longer be used: no more lines, then `failed`, saying why;
- this process stops (shutdown, drain): no more lines, its claim is released at once, and the
  next process to look resumes the batch;
- the claim was lost (the lease ran out while this process stalled): everything stops, and
  nothing more is written.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import logging
from collections.abc import AsyncGenerator, Iterator
from enum import StrEnum
from pathlib import Path
from typing import Any

from django.utils import timezone

from llmserver.batches import claims
from llmserver.batches.lines import Line, not_run, run_line
from llmserver.batches.owner import as_batch_work, lines_in_flight, owner_key
from llmserver.batches.results import ResultFiles
from llmserver.batches.storage import FileStore
from llmserver.batches.validation import ENDPOINTS, Checked, check_lines, numbered_lines
from llmserver.pipeline.port import RequestPort
from llmserver.runtime.db import run_db
from llmserver.runtime.keys import KeyInfo
from tenants.models import Batch, BatchStatus, StoredFile

log = logging.getLogger(__name__)
READ_BLOCK = 256  # lines read from the input file per trip to a worker thread
EXPIRED_MESSAGE = "This request could not be executed before the completion window expired."


class Stop(StrEnum):
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    KEY_GONE = "key_gone"
    RELEASED = "released"
    LOST = "lost"


def _error(code: str, message: str, param: str | None = None) -> dict[str, Any]:
    return {"code": code, "message": message, "param": param, "line": None}


KEY_GONE = _error(
    "invalid_api_key",
    "The API key that created this batch can no longer be used (revoked, expired or deleted).",
)


class BatchRun:
    def __init__(self, port: RequestPort, store: FileStore, batch: Batch, token: str) -> None:
        self.port, self.store, self.batch, self.token = port, store, batch, token
        self.conf = port.settings
        self.results = ResultFiles(store, batch.pk)
        self.kind = ENDPOINTS[batch.endpoint]
        self.stop: Stop | None = None
        self.stopped = asyncio.Event()  # wakes lines waiting to try again
        self.key: KeyInfo | None = None
        self._lines: set[asyncio.Task[None]] = set()

    def request_stop(self, why: Stop, cut: bool) -> None:
        """Send no more lines; `cut`: cancel those in flight as well."""
        if self.stop is None or why == Stop.LOST:
            self.stop = why
        self.stopped.set()
        if cut:
            for task in self._lines:
                task.cancel()

    async def run(self) -> None:
        writer = asyncio.create_task(self.results.run())
        try:
            await self._run()
        except Exception:
            log.exception("batch %s: the run failed; it is released for another try", self.batch.pk)
        finally:
            for task in self._lines:
                task.cancel()
            if self.stop != Stop.LOST:
                # What was answered is recorded, or it would be sent again on resuming.
                with contextlib.suppress(Exception):
                    await self.results.drain()
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer
            with contextlib.suppress(Exception):
                # A no-op once the batch has ended (its runner is cleared with its status).
                await run_db(claims.release, self.batch.pk, self.token)

    async def _run(self) -> None:
        batch = self.batch
        self.key = await run_db(owner_key, batch.api_key_id)
        if self.key is None:
            await self._end(BatchStatus.FAILED, [KEY_GONE])
            return
        source = await run_db(_input_file, batch)
        if source is None:
            missing = _error("file_not_found", f"The input file {batch.input_file_id} is gone.")
            await self._end(BatchStatus.FAILED, [missing])
            return
        path = self.store.path(source.storage_name)
        if batch.status == BatchStatus.VALIDATING and not await self._validate(path, self.key):
            return
        await asyncio.to_thread(self.results.recover)
        if batch.status == BatchStatus.IN_PROGRESS:
            await self._send(path)
        await self._conclude(path)

    async def _validate(self, path: Path, key: KeyInfo) -> bool:
        """Whether the batch may run: a bad input fails it, with its errors."""
        batch = self.batch
        checked = await asyncio.to_thread(
            check_lines,
            numbered_lines(path),
            batch.endpoint,
            self.conf.batch_max_lines,
            self.conf.max_body_bytes,
        )
        self._check_model(checked, key)
        if checked.errors:
            await self._end(BatchStatus.FAILED, checked.errors)
            return False
        began = await run_db(claims.begin, batch.pk, self.token, checked.total, checked.model)
        # Not begun: it was cancelled while it was being validated.
        batch.status = BatchStatus.IN_PROGRESS if began else BatchStatus.CANCELLING
        return True

    def _check_model(self, checked: Checked, key: KeyInfo) -> None:
        model = checked.model
        if checked.errors or not model:
            return
        if model not in self.port.routes() or not key.allows_model(model):
            message = f"The model '{model}' does not exist or this key may not use it."
            checked.error("model_not_found", message, checked.model_line, "body.model")

    # sending ------------------------------------------------------------------------------

    async def _send(self, path: Path) -> None:
        assert self.key is not None
        heartbeat = asyncio.create_task(self._heartbeat())
        room = asyncio.Semaphore(lines_in_flight(self.key, self.conf.batch_concurrency))
        try:
            self._check_window()
            async with contextlib.aclosing(self._unanswered(path)) as lines:
                async for line in lines:
                    await room.acquire()
                    if self.stop is not None:
                        room.release()
                        break
                    task = asyncio.create_task(self._one(line))
                    self._lines.add(task)
                    task.add_done_callback(self._lines.discard)
                    task.add_done_callback(lambda _: room.release())
            if self._lines:
                await asyncio.wait(set(self._lines))
        finally:
            heartbeat.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await heartbeat

    async def _one(self, line: Line) -> None:
        result = await run_line(self.port, self._work_key, self.kind, line, self.stopped)
        if result is not None:
            self.results.put(result)

    def _work_key(self) -> KeyInfo:
        assert self.key is not None
        left = (self.batch.expires_at - timezone.now()).total_seconds()
        return as_batch_work(self.key, left)

    async def _unanswered(self, path: Path) -> AsyncGenerator[Line, None]:
        lines = numbered_lines(path)
        try:
            while block := await asyncio.to_thread(_take, lines, READ_BLOCK):
                for number, raw in block:
                    data = json.loads(raw)
                    if data["custom_id"] not in self.results.done:
                        yield Line(number, data["custom_id"], data["body"])
        finally:
            lines.close()

    # watching -----------------------------------------------------------------------------

    async def _heartbeat(self) -> None:
        period = min(self.conf.batch_poll_interval, self.conf.batch_lease_seconds / 3)
        key_every = max(period, self.conf.key_cache_seconds)
        loop = asyncio.get_running_loop()
        key_checked = loop.time()
        while True:
            await asyncio.sleep(period)
            try:
                await self.beat_once()
                if loop.time() - key_checked >= key_every:
                    key_checked = loop.time()
                    await self._recheck_key()
            except Exception as exc:  # the database away: the lease says how long that may last
                log.warning("batch %s: progress not reported: %s", self.batch.pk, exc)

    async def beat_once(self) -> None:
        """Report progress, renew the claim, and see whether the batch must stop."""
        lease = self.conf.batch_lease_seconds
        progress = self.results.progress()
        status = await run_db(claims.renew, self.batch.pk, self.token, lease, progress)
        if status is None:
            self.request_stop(Stop.LOST, cut=True)
        elif status == BatchStatus.CANCELLING:
            self.request_stop(Stop.CANCELLED, cut=False)
        if self.port.inflight.draining or self.results.broken:
            # In-flight lines are the drain's to finish; the next process resumes the rest.
            # (Results that cannot be written: the next claim, here or elsewhere, tries again.)
            self.request_stop(Stop.RELEASED, cut=False)
        self._check_window()

    def _check_window(self) -> None:
        if timezone.now() >= self.batch.expires_at:
            self.request_stop(Stop.EXPIRED, cut=True)

    async def _recheck_key(self) -> None:
        """A key revoked (or a tier changed) mid-batch applies to its next lines."""
        key = await run_db(owner_key, self.batch.api_key_id)
        if key is None:
            self.request_stop(Stop.KEY_GONE, cut=False)
        else:
            self.key = key

    # ending -------------------------------------------------------------------------------

    async def _conclude(self, path: Path) -> None:
        status, stop = self.batch.status, self.stop
        if stop in (Stop.RELEASED, Stop.LOST):
            return
        if stop == Stop.EXPIRED:
            await self._expire(path)
        elif stop == Stop.KEY_GONE:
            await self._end(BatchStatus.FAILED, [KEY_GONE])
        elif stop == Stop.CANCELLED or status == BatchStatus.CANCELLING:
            await self._end(BatchStatus.CANCELLED)
        elif status == BatchStatus.FINALIZING or await run_db(
            claims.finalizing, self.batch.pk, self.token
        ):
            await self._end(BatchStatus.COMPLETED)
        else:  # every line answered, but a cancel came first
            await self._end(BatchStatus.CANCELLED)

    async def _expire(self, path: Path) -> None:
        """Every line not answered is recorded as not run (those cut in flight too)."""
        await self.results.drain()
        async with contextlib.aclosing(self._unanswered(path)) as lines:
            async for line in lines:
                self.results.put(not_run(line.custom_id, "batch_expired", EXPIRED_MESSAGE))
        await self._end(BatchStatus.EXPIRED)

    async def _end(self, status: BatchStatus, errors: list[dict[str, Any]] | None = None) -> None:
        await self.results.drain()
        outputs = await asyncio.to_thread(self.results.outputs)
        progress = self.results.progress()
        await run_db(claims.finish, self.batch.pk, self.token, status, progress, outputs, errors)


def _input_file(batch: Batch) -> StoredFile | None:
    return StoredFile.objects.filter(tenant_id=batch.tenant_id, pk=batch.input_file_id).first()


def _take(lines: Iterator[tuple[int, bytes]], n: int) -> list[tuple[int, bytes]]:
    return list(itertools.islice(lines, n))
