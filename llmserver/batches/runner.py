"""The gateway process's batch runner: looks for batches no process holds, claims them, and
runs each (`BatchRun`) as a task of its own, at most `BATCH_MAX_ACTIVE` at once.

Started and stopped beside the gateway (`llmserver/process.py`): `poll_once()` is the step, `run()`
repeats it every `BATCH_POLL_INTERVAL`. A batch in progress when a process stopped is found
again by the next look of any process: at once after a clean stop (its claim was released),
after `BATCH_LEASE_SECONDS` after a crash.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import socket
import uuid

from llmserver.batches import claims
from llmserver.batches.batch_run import BatchRun, Stop
from llmserver.batches.storage import FileStore
from llmserver.pipeline.port import RequestPort
from llmserver.runtime.db import run_db

log = logging.getLogger(__name__)
STOP_SECONDS = 10.0  # how long a stop waits for runs to record what they have


class BatchRunner:
    def __init__(self, port: RequestPort) -> None:
        """`port`: what the lines of its batches run through, as any request does."""
        self.port = port
        self.conf = port.settings
        self.store = FileStore(self.conf.files_dir)
        # Names this process in each claim: host, pid, and this runner (a restarted gateway in
        # the same process is another runner).
        self.token = f"{socket.gethostname()[:80]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self.runs: dict[str, BatchRun] = {}
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self.stopping = False

    async def poll_once(self) -> list[str]:
        """Claim and start what this process has room for; returns the batch ids started."""
        room = self.conf.batch_max_active - len(self._tasks)
        if room <= 0 or self.stopping or self.port.inflight.draining:
            return []
        started = []
        for batch_id in await run_db(claims.claimable, room, set(self._tasks)):
            batch = await run_db(claims.claim, batch_id, self.token, self.conf.batch_lease_seconds)
            if batch is None:
                continue  # another process was quicker
            if self.stopping:  # the stop came during this look: its runs are already cut
                await run_db(claims.release, batch_id, self.token)
                break
            run = self.runs[batch_id] = BatchRun(self.port, self.store, batch, self.token)
            task = self._tasks[batch_id] = asyncio.create_task(run.run())
            task.add_done_callback(functools.partial(self._forget, batch_id))
            started.append(batch_id)
        return started

    def _forget(self, batch_id: str, _: object = None) -> None:
        self.runs.pop(batch_id, None)
        self._tasks.pop(batch_id, None)

    async def run(self) -> None:
        while True:
            try:
                await self.poll_once()
            except Exception as exc:
                log.warning("the batch runner could not look for work: %s", exc)
            await asyncio.sleep(self.conf.batch_poll_interval)

    async def stop(self) -> None:
        """Cut the lines in flight (they are sent again by whoever resumes), record what was
        answered, and release every claim, so the batches resume at once elsewhere."""
        self.stopping = True
        for run in self.runs.values():
            run.request_stop(Stop.RELEASED, cut=True)
        tasks = list(self._tasks.values())
        if not tasks:
            return
        _, late = await asyncio.wait(tasks, timeout=STOP_SECONDS)
        for task in late:
            task.cancel()
        for task in late:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
