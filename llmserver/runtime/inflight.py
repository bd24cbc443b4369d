"""The completions running in this process: what a drain waits for and then ends, and whose each
is (tenant and user: who may ask where a request stands, GET /v1/requests/{id},
`tenants/visibility.py`)."""

from __future__ import annotations

import asyncio
import logging

log = logging.getLogger(__name__)


class InFlight:
    def __init__(self) -> None:
        self.tasks: set[asyncio.Task[None]] = set()
        self.owners: dict[str, tuple[int, str]] = {}  # request id -> (tenant id, user)
        self.draining = False  # new completions are refused
        self.stopping = False  # the drain ran out of time: those left end now

    def enter(self, task: asyncio.Task[None], request_id: str, tenant_id: int, user: str) -> None:
        self.tasks.add(task)
        self.owners[request_id] = (tenant_id, user)

    def leave(self, task: asyncio.Task[None], request_id: str) -> None:
        self.tasks.discard(task)
        self.owners.pop(request_id, None)

    def owner(self, request_id: str) -> tuple[int, str] | None:
        """The tenant id and user of a request running here; None: not running here."""
        return self.owners.get(request_id)

    async def drain(self, seconds: float) -> None:
        """Refuse new completions, wait up to `seconds` for those running, then end the rest
        (their `Completion.run` sees `stopping` and ends them cleanly)."""
        self.draining = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while self.tasks and loop.time() < deadline:
            await asyncio.sleep(0.05)
        left = set(self.tasks)
        if left:
            log.warning("drain time is up: ending %d requests still running", len(left))
            self.stopping = True
            for task in left:
                task.cancel()
            await asyncio.wait(left, timeout=5)
