"""The gateway process's long-lived state, started on the first request and stopped at shutdown.

One `Gateway` per process (`llmserver/process.py` holds it): the scheduler (here, or shared
through Redis), the backends it talks to and their prompt keyer (`BackendPool`), the
configuration kept current (`ConfigWatch`), the key cache, the admission limits, the usage writer
and pruner, what it reports about itself (`Telemetry`: metrics, traces, dashboard snapshots),
the completions in flight and what was learned from those that ended. Each does one job; the
gateway starts, wires and stops them. A request sees the gateway as its port
(`llmserver/pipeline/port.py`, `RequestPort`), which the gateway implements without importing.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable, Coroutine, Iterable, Mapping
from typing import Any

from llmserver.backends.pool import BackendPool
from llmserver.backends.upstream import UpstreamClient
from llmserver.cluster.transport import SchedulerTransport
from llmserver.conf import GatewaySettings, SchedulerTransportKind, gateway_settings
from llmserver.runtime import notices
from llmserver.runtime.config import GatewayConfig
from llmserver.runtime.config_watch import ConfigWatch
from llmserver.runtime.eta import Estimates
from llmserver.runtime.events import RequestEvents
from llmserver.runtime.inflight import InFlight
from llmserver.runtime.keys import KeyCache, KeyInfo
from llmserver.runtime.limits import AdmissionLimits
from llmserver.runtime.observability import GatewayMetrics, KvEventsCollector
from llmserver.runtime.pricing import Pricing
from llmserver.runtime.pruning import UsagePruner
from llmserver.runtime.snapshots import SnapshotPublisher
from llmserver.runtime.telemetry import Telemetry, gateway_tracing
from llmserver.runtime.usage import UsageWriter
from llmserver.wire.validation import CompletionRequest
from scheduling import CostPolicy, SchedulerConfig, SchedulerService, SchedulerSnapshot
from tenants.endpoints import Endpoint

log = logging.getLogger(__name__)


class Gateway:
    def __init__(
        self, conf: GatewaySettings | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = conf = conf or gateway_settings()
        self.clock = clock
        self.keys = KeyCache(conf.key_cache_seconds, clock=clock)
        self.limits = AdmissionLimits.from_settings(conf)
        self.usage = UsageWriter(
            conf.usage_flush_interval, conf.usage_batch_size, self.limits.holds.release
        )
        self.pruner = UsagePruner(conf.usage_retention_days)
        metrics = GatewayMetrics(self.snapshot, self.usage)
        # The one seam to a scheduler elsewhere: in this process (the default, no Redis), or
        # shared through Redis by every process of a cluster.
        self.scheduler = self._scheduler(conf, clock, metrics)
        self.backends = BackendPool(conf, self.scheduler, clock)
        metrics.registry.register(KvEventsCollector(self.backends.subscribers))
        self.telemetry = Telemetry(
            metrics,
            # Off (a no-op shared by every request) unless OTEL_* names an exporter.
            gateway_tracing(conf),
            # In a cluster the leader alone publishes: it holds the queues.
            SnapshotPublisher(self.snapshot, lambda: self.scheduler.leading),
        )
        self.config_watch = ConfigWatch(conf, self._apply, self.keys.clear)
        self.inflight = InFlight()
        self.estimates = Estimates()
        self._tasks: list[asyncio.Task[None]] = []

    @staticmethod
    def _scheduler(
        conf: GatewaySettings, clock: Callable[[], float], metrics: GatewayMetrics
    ) -> SchedulerTransport:
        if conf.scheduler_transport != SchedulerTransportKind.REDIS:
            return SchedulerService(SchedulerConfig(), (), clock)
        from llmserver.cluster.metrics import ClusterCollector
        from llmserver.cluster.node import ClusterScheduler

        cluster = ClusterScheduler(
            conf.redis_url,
            conf.cluster_prefix,
            conf.cluster_lease_seconds,
            SchedulerConfig(),
            clock=clock,
        )
        metrics.registry.register(ClusterCollector(cluster))
        return cluster

    @property
    def started(self) -> bool:
        return bool(self._tasks)

    # lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        await self.scheduler.start()
        await self.config_watch.start()
        work: list[Coroutine[Any, Any, None]] = [
            self.usage.run(),
            self.pruner.run(),
            self.limits.holds.run(),
            self.config_watch.run_reloads(),
            self.config_watch.run_watch(),
            self.telemetry.publisher.run(),
            self._sweep_keys(),
        ]
        if self.settings.redis_url:
            # Other processes' config changes, at once rather than at the next watch.
            work.append(
                notices.listen(
                    self.settings.redis_url, self.settings.cluster_prefix, self.mark_dirty
                )
            )
        self._tasks = [asyncio.create_task(w) for w in work]

    async def stop(self) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        await self.backends.aclose()
        await self.scheduler.stop()
        await self.usage.flush_once()
        await self.limits.aclose()
        await self.telemetry.aclose()

    async def drain(self, seconds: float) -> None:
        """Refuse new completions, wait up to `seconds` for those running, end the rest and
        write all usage."""
        await self.inflight.drain(seconds)
        await self.usage.flush_once()

    async def _sweep_keys(self) -> None:
        while True:
            await asyncio.sleep(self.settings.key_cache_seconds or 1.0)
            self.keys.drop_expired()  # keys not used since: their memory back

    # configuration --------------------------------------------------------------------------

    @property
    def config(self) -> GatewayConfig | None:
        return self.config_watch.config

    def mark_dirty(self) -> None:
        """Called from any thread (admin saves run in worker threads)."""
        self.config_watch.mark_dirty()

    async def reload_once(self) -> None:
        await self.config_watch.reload_once()

    def _apply(self, config: GatewayConfig) -> None:
        self.backends.apply(config.backends, config.scheduler, config.scheduler_backends)
        self.backends.prompts.via = config.tokenize_via

    def pricing(self, tenant_id: int | None = None) -> Pricing:
        """The cost policy and prices in force for `tenant_id`."""
        config = self.config
        if config is None:
            return Pricing(CostPolicy(self.settings.cost_unit))
        return config.pricing(tenant_id)

    def pool(self, model: str, endpoint: Endpoint) -> Mapping[str, str] | None:
        """The backends serving `model` on `endpoint` now; None: no route serves the model."""
        config = self.config
        return config.pool(model, endpoint) if config is not None else None

    def routes(self) -> Mapping[str, Mapping[str, str]]:
        """Public model name -> {backend: the backend's model name}, as configured now."""
        config = self.config
        return config.routes if config is not None else {}

    def stop_preempting(self, backend: str, why: str) -> None:
        """`backend` refused to continue a paused stream: no more pauses there (see the pool)."""
        if self.backends.stop_preempting(backend, why):
            self.telemetry.metrics.resume_refused.labels(backend).inc()

    # a request's port (llmserver/pipeline/port.py) -----------------------------------------

    async def token_blocks(
        self, model: str, kind: str, body: dict[str, Any], request_id: str
    ) -> tuple[int, ...] | None:
        """The prompt's token blocks, where its pool routes by the backends' caches."""
        return await self.backends.prompts.token_blocks(model, kind, body, request_id)

    def client(self, backend: str) -> UpstreamClient:
        return self.backends.client(backend)

    def events(
        self,
        request_id: str,
        key: KeyInfo,
        req: CompletionRequest,
        client_headers: Iterable[tuple[bytes, bytes]],
    ) -> RequestEvents:
        return self.telemetry.request(request_id, key, req, client_headers)

    # state ----------------------------------------------------------------------------------

    def snapshot(self) -> SchedulerSnapshot:
        return self.scheduler.snapshot()

    def scheduler_state(self) -> str:
        """For /readyz: "local" (one process), or this process's part in a cluster: "leader",
        "follower", or "redis_unavailable" (new requests refused with 503)."""
        return self.scheduler.state
