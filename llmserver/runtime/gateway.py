"""The gateway process's long-lived state, started on the first request and stopped at shutdown.

One `Gateway` per process holds the scheduler service, one upstream client and one metrics poller
per backend, the key cache, the usage writer and the metrics registry. Configuration comes from
the database and is reloaded when the admin changes it (signals) and every few seconds (changes
made by another process).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings

from llmserver.backends.metrics import MetricsPoller
from llmserver.backends.upstream import UpstreamClient
from llmserver.runtime.config import GatewayConfig, load_gateway_config
from llmserver.runtime.keys import KeyCache
from llmserver.runtime.observability import GatewayMetrics
from llmserver.runtime.usage import UsageWriter
from scheduling import CostUnit, SchedulerService

log = logging.getLogger(__name__)
RELOAD_INTERVAL = 5.0
PUBLISH_INTERVAL = 0.5


class Gateway:
    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        conf = settings.LLMSERVER
        self.conf = conf
        self.clock = clock
        self.cost_unit = CostUnit(conf["COST_UNIT"])
        self.keys = KeyCache(conf["KEY_CACHE_SECONDS"], clock=clock)
        self.usage = UsageWriter(conf["USAGE_FLUSH_INTERVAL"], conf["USAGE_BATCH_SIZE"])
        self.metrics = GatewayMetrics(self.snapshot)
        self.config: GatewayConfig | None = None
        self.scheduler: SchedulerService | None = None
        self.clients: dict[str, UpstreamClient] = {}
        self._pollers: dict[str, asyncio.Task[None]] = {}
        self._tasks: list[asyncio.Task[None]] = []
        self._dirty = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.started = False

    # lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        config = await sync_to_async(load_gateway_config, thread_sensitive=False)()
        self.scheduler = SchedulerService(config.scheduler, config.scheduler_backends, self.clock)
        await self.scheduler.start()
        self._apply(config)
        self._tasks = [
            self._loop.create_task(self.usage.run(), name="usage-writer"),
            self._loop.create_task(self._reload_loop(), name="config-reload"),
            self._loop.create_task(self._publish_loop(), name="dashboard-publish"),
        ]
        self.started = True

    async def stop(self) -> None:
        for task in [*self._tasks, *self._pollers.values()]:
            task.cancel()
        for task in [*self._tasks, *self._pollers.values()]:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks, self._pollers = [], {}
        if self.scheduler is not None:
            await self.scheduler.stop()
        await self.usage.flush_once()
        for client in self.clients.values():
            await client.aclose()
        self.clients = {}
        self.started = False

    # configuration --------------------------------------------------------------------------

    def mark_dirty(self) -> None:
        """Called from any thread (admin saves run in worker threads)."""
        self.keys.clear()
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._dirty.set)

    async def reload_once(self) -> None:
        config = await sync_to_async(load_gateway_config, thread_sensitive=False)()
        self._apply(config)

    def _apply(self, config: GatewayConfig) -> None:
        assert self.scheduler is not None
        old = self.config.backends if self.config else {}
        conf = self.conf
        for name, spec in config.backends.items():
            if old.get(name) == spec and name in self.clients:
                continue
            self._drop_backend(name)
            client = UpstreamClient(
                spec.base_url,
                spec.kind,
                api_key=spec.api_key,
                max_connections=conf["UPSTREAM_MAX_CONNECTIONS"],
                connect_timeout=conf["UPSTREAM_CONNECT_TIMEOUT"],
                read_timeout=conf["UPSTREAM_READ_TIMEOUT"],
                keepalive_expiry=conf["UPSTREAM_KEEPALIVE_EXPIRY"],
                name=name,
            )
            self.clients[name] = client
            if spec.metrics_url:
                poller = MetricsPoller(
                    name,
                    spec.kind,
                    spec.metrics_url,
                    client.http,
                    self.scheduler.update_metrics,
                    interval=conf["SCRAPE_INTERVAL"],
                    timeout=conf["SCRAPE_TIMEOUT"],
                    clock=self.clock,
                )
                self._pollers[name] = asyncio.get_running_loop().create_task(
                    poller.run(), name=f"poll-{name}"
                )
        for name in set(self.clients) - set(config.backends):
            self._drop_backend(name)
        self.scheduler.configure(config.scheduler, config.scheduler_backends)
        self.config = config

    def _drop_backend(self, name: str) -> None:
        poller = self._pollers.pop(name, None)
        if poller is not None:
            poller.cancel()
        client = self.clients.pop(name, None)
        if client is not None:
            # In-flight streams keep their own reference; close once they are done.
            asyncio.get_running_loop().create_task(client.aclose())

    async def _reload_loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._dirty.wait(), RELOAD_INTERVAL)
            self._dirty.clear()
            try:
                await self.reload_once()
            except Exception:
                log.exception("reloading the gateway configuration failed; keeping the old one")

    async def _publish_loop(self) -> None:
        from llmserver.dashboard import publish_snapshot

        last: Any = None
        while True:
            await asyncio.sleep(PUBLISH_INTERVAL)
            snap = self.snapshot()
            if snap is None:
                continue
            comparable = {k: v for k, v in snap.items() if k != "at"}
            if comparable == last:
                continue
            last = comparable
            try:
                await publish_snapshot(snap)
            except Exception:
                log.exception("publishing the dashboard snapshot failed")

    def snapshot(self) -> dict[str, Any] | None:
        return self.scheduler.snapshot() if self.scheduler is not None else None


_gateway: Gateway | None = None
_starting: asyncio.Lock | None = None


async def get_gateway() -> Gateway:
    """The process's gateway, started on first use in the running loop."""
    global _gateway, _starting
    if _gateway is not None and _gateway.started:
        return _gateway
    if _starting is None:
        _starting = asyncio.Lock()
    async with _starting:
        if _gateway is None or not _gateway.started:
            gateway = Gateway()
            await gateway.start()
            _gateway = gateway
            _register_shutdown(gateway)
    return _gateway


def current_gateway() -> Gateway | None:
    return _gateway


async def reset_gateway() -> None:
    """Stop and forget the process's gateway (tests, and shutdown)."""
    global _gateway, _starting
    gateway, _gateway, _starting = _gateway, None, None
    if gateway is not None:
        await gateway.stop()


def _register_shutdown(gateway: Gateway) -> None:
    """Under daphne (Twisted), flush usage and close clients before the reactor stops."""
    try:
        from twisted.internet import reactor
    except ImportError:
        return
    if not getattr(reactor, "running", False):
        return
    from twisted.internet.defer import Deferred

    def before_shutdown() -> Deferred:
        return Deferred.fromFuture(asyncio.ensure_future(reset_gateway()))

    reactor.addSystemEventTrigger("before", "shutdown", before_shutdown)
