"""The gateway process's long-lived state, started on the first request and stopped at shutdown.

One `Gateway` per process holds the scheduler service, one upstream client and one metrics poller
per backend, the key cache, the usage writer and the metrics registry. Configuration comes from
the database and is reloaded when the admin changes it (signals) and every few seconds (changes
made by another process).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections import deque
from collections.abc import Callable, Mapping
from dataclasses import asdict, replace
from typing import TYPE_CHECKING

from llmserver.backends.kv_events import KvEventSubscriber
from llmserver.backends.llamacpp import read_capacity
from llmserver.backends.metrics import MetricsPoller
from llmserver.backends.upstream import BackendError, UpstreamClient
from llmserver.cluster.transport import SchedulerTransport
from llmserver.conf import GatewaySettings, SchedulerTransportKind, gateway_settings
from llmserver.runtime import notices
from llmserver.runtime.config import GatewayConfig, load_gateway_config
from llmserver.runtime.db import run_db
from llmserver.runtime.eta import ServiceTimes
from llmserver.runtime.keys import KeyCache
from llmserver.runtime.observability import GatewayMetrics, KvEventsCollector
from llmserver.runtime.prompt_tokens import SharedStarts, shared_start_key, tokenize_request
from llmserver.runtime.ratelimit import sliding_window
from llmserver.runtime.reservations import reservations
from llmserver.runtime.usage import UsageWriter
from scheduling import (
    AllBlocksCleared,
    BackendConfig,
    CostPolicy,
    OutputLengths,
    SchedulerConfig,
    SchedulerService,
    SchedulerSnapshot,
)
from tenants.models import config_changes

if TYPE_CHECKING:
    from llmserver.api.validation import CompletionRequest
    from llmserver.cluster.node import ClusterScheduler

log = logging.getLogger(__name__)
PUBLISH_INTERVAL = 0.5
RECENT_TTFT_KEPT = 10_000
# How often the database's configuration change counter is read, so that a change made by another
# process (a key revoked from the command line, another gateway's admin) takes effect within
# about this long; one primary-key read when nothing changed (tenants.models.config_changes).
WATCH_INTERVAL = 0.5
# How long admission waits for a backend's /tokenize before it keys the prompt by characters,
# and how long a backend whose /tokenize failed is not asked again.
TOKENIZE_TIMEOUT = 2.0
TOKENIZE_REST = 10.0
# Answers that say the backend has no /tokenize at all (not the prompt's fault): it rests too.
NO_TOKENIZE = (404, 405, 501)


class Gateway:
    def __init__(
        self, conf: GatewaySettings | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = conf = conf or gateway_settings()
        self.clock = clock
        self.keys = KeyCache(conf.key_cache_seconds, clock=clock)
        self.reservations = reservations(
            conf.rate_limit_redis_url, f"{conf.cluster_prefix}:reservations:"
        )
        self.rate_window = sliding_window(
            conf.rate_limit_redis_url, f"{conf.cluster_prefix}:ratelimit:"
        )
        self.usage = UsageWriter(
            conf.usage_flush_interval, conf.usage_batch_size, self.reservations.release
        )
        self.metrics = GatewayMetrics(self.snapshot, self.usage)
        self.config: GatewayConfig | None = None
        # The one seam to a scheduler elsewhere: in this process (the default, no Redis), or
        # shared through Redis by every process of a cluster (`self.cluster`).
        self.cluster: ClusterScheduler | None = None
        self.scheduler: SchedulerTransport
        if conf.scheduler_transport == SchedulerTransportKind.REDIS:
            from llmserver.cluster.metrics import ClusterCollector
            from llmserver.cluster.node import ClusterScheduler

            self.cluster = ClusterScheduler(
                conf.redis_url,
                conf.cluster_prefix,
                conf.cluster_lease_seconds,
                SchedulerConfig(),
                clock=clock,
            )
            self.scheduler = self.cluster
            self.metrics.registry.register(ClusterCollector(self.cluster))
        else:
            self.scheduler = SchedulerService(SchedulerConfig(), (), clock)
        self.clients: dict[str, UpstreamClient] = {}
        self._pollers: dict[str, asyncio.Task[None]] = {}
        self.kv_events: dict[str, tuple[KvEventSubscriber, asyncio.Task[None]]] = {}
        self._tokenize_rest: dict[str, float] = {}  # backend -> when its /tokenize is asked again
        self.shared_starts = SharedStarts()
        self.metrics.registry.register(
            KvEventsCollector(lambda: {name: sub for name, (sub, _) in self.kv_events.items()})
        )
        self._tasks: list[asyncio.Task[None]] = []
        self._dirty = asyncio.Event()
        # One reload at a time: a slow load begun before a change must not apply after a
        # later load that saw it (the older configuration would win).
        self._reloading = asyncio.Lock()
        self._config_changes = 0  # the database's change count this configuration reflects
        self.draining = False
        self.stopping = False
        self.running: set[asyncio.Task[None]] = set()
        # Live requests' ids -> the API key that sent them: for GET /v1/requests/{id}.
        self.owners: dict[str, int] = {}
        # Backends that refused to continue a paused stream: no more pauses on them in this
        # process, whatever their configuration says (see `stop_preempting`).
        self.cannot_resume: set[str] = set()
        self.service_times = ServiceTimes()
        self.output_lengths = OutputLengths()
        # (band, seconds) of first tokens since the last dashboard update; drained when published.
        self.recent_ttft: deque[tuple[int, float]] = deque(maxlen=RECENT_TTFT_KEPT)
        self._loop: asyncio.AbstractEventLoop | None = None
        self.started = False

    # lifecycle ------------------------------------------------------------------------------

    async def start(self) -> None:
        self._loop = asyncio.get_running_loop()
        config = await self._load_settled()
        await self.scheduler.start()
        self._apply(config)
        self._tasks = [
            self._loop.create_task(self.usage.run(), name="usage-writer"),
            self._loop.create_task(self.reservations.run(), name="reservations"),
            self._loop.create_task(self._reload_loop(), name="config-reload"),
            self._loop.create_task(self._publish_loop(), name="dashboard-publish"),
            self._loop.create_task(self._watch_loop(), name="config-watch"),
        ]
        if self.settings.redis_url:
            # Other processes' config changes, at once rather than at the next watch.
            notice = notices.listen(
                self.settings.redis_url, self.settings.cluster_prefix, self.mark_dirty
            )
            self._tasks.append(self._loop.create_task(notice, name="config-notices"))
        self.started = True

    async def stop(self) -> None:
        tasks = [*self._tasks, *self._pollers.values(), *(t for _, t in self.kv_events.values())]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks, self._pollers, self.kv_events = [], {}, {}
        await self.scheduler.stop()
        await self.usage.flush_once()
        for client in self.clients.values():
            await client.aclose()
        self.clients = {}
        await self.rate_window.aclose()
        await self.reservations.aclose()
        self.started = False

    async def drain(self, seconds: float) -> None:
        """Refuse new completions, wait up to `seconds` for those running, then end the rest
        (their `Completion.run` sees `stopping` and ends them cleanly) and write all usage."""
        self.draining = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while self.running and loop.time() < deadline:
            await asyncio.sleep(0.05)
        left = set(self.running)
        if left:
            log.warning("drain time is up: ending %d requests still running", len(left))
            self.stopping = True
            for task in left:
                task.cancel()
            await asyncio.wait(left, timeout=5)
        await self.usage.flush_once()

    # configuration --------------------------------------------------------------------------

    def mark_dirty(self) -> None:
        """Called from any thread (admin saves run in worker threads)."""
        self.keys.clear()
        if self._loop is not None and not self._loop.is_closed():
            self._loop.call_soon_threadsafe(self._dirty.set)

    async def _load_settled(self) -> GatewayConfig:
        """The configuration and the change count it reflects, read again while the count moved
        during the load (the first load of a fresh database creates the fair-share policy; or
        another process wrote): so a start is not followed by a needless reload."""
        for _ in range(3):
            before = await run_db(config_changes)
            config = await run_db(load_gateway_config, self.settings)
            if await run_db(config_changes) == before:
                break
        self._config_changes = before  # still moving: the watch reloads once more
        return config

    async def reload_once(self) -> None:
        async with self._reloading:
            config = await run_db(load_gateway_config, self.settings)
            self._apply(config)

    def prices(self, tenant_id: int | None = None) -> Mapping[str, tuple[float, float]]:
        """Public model name -> (input, output) price per million tokens in force: the list
        price, or `tenant_id`'s own where it has one."""
        if self.config is None:
            return {}
        own = self.config.tenant_prices.get(tenant_id) if tenant_id is not None else None
        return own or self.config.prices

    def cost_policy(self) -> CostPolicy:
        """The fair-share cost unit and token weights in force (the admin's policy)."""
        if self.config is None:
            return CostPolicy(self.settings.cost_unit)
        return self.config.cost

    async def token_blocks(self, req: CompletionRequest, request_id: str) -> tuple[int, ...] | None:
        """The prompt's leading token blocks, for a model whose pool has backends publishing
        their KV cache events (their blocks are tokens): a chat's shared start from memory when
        it was tokenized before (`llmserver.runtime.prompt_tokens`). None elsewhere, or when
        /tokenize fails (the prompt keeps its character blocks: it is still routed, by the
        routing history). A backend whose /tokenize failed (not a 4xx: the prompt's own fault)
        rests for TOKENIZE_REST seconds, and the next of the pool's is asked meanwhile. A prompt
        too short to fill a block keeps its character blocks."""
        now = self.clock()
        candidates = self.config.tokenize_via.get(req.model, ()) if self.config else ()
        if not candidates:
            return None
        key = shared_start_key(req.model, req.kind, req.body)
        if key is not None and (known := self.shared_starts.get(key)) is not None:
            return known or None
        via = next((c for c in candidates if self._tokenize_rest.get(c[0], 0.0) <= now), None)
        client = self.clients.get(via[0]) if via is not None else None
        if via is None or client is None:
            return None
        body = tokenize_request(req.kind, via[1], req.body, shared=key is not None)
        try:
            _, data = await asyncio.wait_for(
                client.complete("/tokenize", body, request_id=request_id), TOKENIZE_TIMEOUT
            )
        except (BackendError, TimeoutError) as exc:
            status = exc.status if isinstance(exc, BackendError) else None
            if status is None or status >= 500 or status in NO_TOKENIZE:
                self._tokenize_rest[via[0]] = self.clock() + TOKENIZE_REST
            return None
        tokens = data.get("tokens")
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            return None
        # Too short to fill a block: the character blocks stay.
        return self.shared_starts.learn(key, tokens) or None

    def routes(self) -> Mapping[str, Mapping[str, str]]:
        """Public model name -> {backend: the backend's model name}, as configured now."""
        return self.config.routes if self.config is not None else {}

    def _apply(self, config: GatewayConfig) -> None:
        old = self.config.backends if self.config else {}
        conf = self.settings
        for name, spec in config.backends.items():
            if old.get(name) == spec and name in self.clients:
                continue
            # Another setting changed: the same event stream is kept (a new subscription would
            # miss, uncounted, what is published while it joins). A stream changed or gone:
            # what it said the backend holds can no longer be taken back, so it is forgotten.
            before = old.get(name)
            same_stream = before is not None and (
                before.kv_events_endpoint,
                before.kv_events_bind,
            ) == (
                spec.kv_events_endpoint,
                spec.kv_events_bind,
            )
            kept = self.kv_events.pop(name, None) if same_stream else None
            if before is not None and before.kv_events_endpoint and not same_stream:
                self.scheduler.cache_events(name, [AllBlocksCleared()])
            self._drop_backend(name)
            client = UpstreamClient(
                spec.base_url,
                spec.kind,
                api_key=spec.api_key,
                max_connections=conf.upstream_max_connections,
                connect_timeout=conf.upstream_connect_timeout,
                read_timeout=conf.upstream_read_timeout,
                first_byte_timeout=spec.first_byte_timeout,
                priority_scheduling=spec.priority_scheduling,
                keepalive_expiry=conf.upstream_keepalive_expiry,
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
                    read_capacity=(
                        functools.partial(read_capacity, client.http, spec.base_url)
                        if client.profile.reads_capacity
                        else None
                    ),
                    interval=conf.scrape_interval,
                    timeout=conf.scrape_timeout,
                    clock=self.clock,
                )
                self._pollers[name] = asyncio.get_running_loop().create_task(
                    poller.run(), name=f"poll-{name}"
                )
            if kept is not None:
                self.kv_events[name] = kept
            elif spec.kv_events_endpoint:
                subscriber = KvEventSubscriber(
                    name,
                    spec.kv_events_endpoint,
                    self.scheduler.cache_events,
                    bind=spec.kv_events_bind,
                )
                task = asyncio.get_running_loop().create_task(
                    subscriber.run(), name=f"kv-events-{name}"
                )
                self.kv_events[name] = (subscriber, task)
        for name in set(self.clients) - set(config.backends):
            self._drop_backend(name)
        self.scheduler.configure(config.scheduler, self._scheduler_backends(config))
        self.config = config

    def _scheduler_backends(self, config: GatewayConfig) -> tuple[BackendConfig, ...]:
        return tuple(
            replace(b, preemption=False) if b.name in self.cannot_resume else b
            for b in config.scheduler_backends
        )

    def stop_preempting(self, backend: str, why: str) -> None:
        """`backend` refused to continue a paused stream: pausing there harms clients, so it
        stops for this process (until restart), loudly."""
        if backend in self.cannot_resume or self.config is None:
            return
        self.cannot_resume.add(backend)
        log.error(
            "backend %s refused to continue a paused stream (%s): preemption is off on it "
            "for this process; untick 'preemption' on the backend or fix the server",
            backend,
            why,
        )
        self.metrics.resume_refused.labels(backend).inc()
        self.scheduler.configure(backends=self._scheduler_backends(self.config))

    def _drop_backend(self, name: str) -> None:
        poller = self._pollers.pop(name, None)
        if poller is not None:
            poller.cancel()
        subscribed = self.kv_events.pop(name, None)
        if subscribed is not None:
            subscribed[1].cancel()
        client = self.clients.pop(name, None)
        if client is not None:
            client.retire()  # closed once the requests under way on it have ended

    async def _reload_loop(self) -> None:
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            try:
                await self.reload_once()
            except Exception:
                log.exception("reloading the gateway configuration failed; keeping the old one")

    async def watch_config_once(self) -> bool:
        """Reload (and drop the cached keys) if the database's configuration change counter
        moved since the last look: a change by any process or tool. Returns whether it had."""
        count = await run_db(config_changes)
        if count == self._config_changes:
            return False
        self._config_changes = count
        self.mark_dirty()
        return True

    async def _watch_loop(self) -> None:
        since_sweep = 0.0
        while True:
            await asyncio.sleep(WATCH_INTERVAL)
            since_sweep += WATCH_INTERVAL
            if since_sweep >= self.settings.key_cache_seconds:
                self.keys.drop_expired()  # keys not used since: their memory back
                since_sweep = 0.0
            try:
                await self.watch_config_once()
            except Exception:
                log.exception("reading the configuration change counter failed; will retry")

    async def _publish_loop(self) -> None:
        from llmserver.dashboard import publish_snapshot

        last: SchedulerSnapshot | None = None
        while True:
            await asyncio.sleep(PUBLISH_INTERVAL)
            if self.cluster is not None and not self.cluster.leading:
                continue  # the leader holds the queues; one publisher, not one per process
            snap = self.snapshot()
            if snap.same_state(last) and not self.recent_ttft:
                continue
            last = snap
            try:
                await publish_snapshot(
                    {**asdict(snap), "wall": time.time(), "ttft": self._drain_ttft()}
                )
            except Exception:
                log.exception("publishing the dashboard snapshot failed")

    def _drain_ttft(self) -> dict[int, dict[str, float]]:
        """Mean and max time to first token per band since the last update, for the charts;
        `/metrics` keeps the histograms."""
        per_band: dict[int, list[float]] = {}
        while self.recent_ttft:
            band, seconds = self.recent_ttft.popleft()
            per_band.setdefault(band, []).append(seconds)
        return {
            band: {"mean": sum(xs) / len(xs), "max": max(xs), "count": len(xs)}
            for band, xs in per_band.items()
        }

    def snapshot(self) -> SchedulerSnapshot:
        return self.scheduler.snapshot()

    def scheduler_state(self) -> str:
        """For /readyz: "local" (one process), or this process's part in a cluster: "leader",
        "follower", or "redis_unavailable" (new requests refused with 503)."""
        return "local" if self.cluster is None else self.cluster.state


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

    def before_shutdown() -> Deferred[None]:
        return Deferred.fromFuture(asyncio.ensure_future(reset_gateway()))

    reactor.addSystemEventTrigger("before", "shutdown", before_shutdown)  # type: ignore[arg-type]
