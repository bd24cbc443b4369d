"""The backends this process talks to: one upstream client, one metrics poller and one KV event
subscriber per configured backend, replaced when the admin changes it and retired (closed once
the requests under way on it have ended) when it goes; and the prompt keyer that asks their
`/tokenize`.

The scheduler hears from the pool: each poller's scrape (`update_metrics`), each subscriber's
cache events, and which backends may be preempted on (a backend that refused to continue a paused
stream may not, for the rest of the process: `stop_preempting`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import Callable, Mapping
from dataclasses import replace

from llmserver.backends.kv_events import KvEventSubscriber
from llmserver.backends.llamacpp import read_capacity
from llmserver.backends.metrics import MetricsPoller
from llmserver.backends.prompt_tokens import PromptKeyer
from llmserver.backends.spec import BackendSpec
from llmserver.backends.upstream import UpstreamClient
from llmserver.cluster.transport import SchedulerTransport
from llmserver.conf import GatewaySettings
from scheduling import AllBlocksCleared, BackendConfig, SchedulerConfig

log = logging.getLogger(__name__)


class BackendPool:
    def __init__(
        self, settings: GatewaySettings, scheduler: SchedulerTransport, clock: Callable[[], float]
    ) -> None:
        self.settings = settings
        self.scheduler = scheduler
        self.clock = clock
        self.clients: dict[str, UpstreamClient] = {}
        self.kv_events: dict[str, tuple[KvEventSubscriber, asyncio.Task[None]]] = {}
        # Backends that refused to continue a paused stream: no more pauses on them in this
        # process, whatever their configuration says (see `stop_preempting`).
        self.cannot_resume: set[str] = set()
        # Prompts keyed by the token blocks a backend's /tokenize gives (see prompt_tokens.py).
        self.prompts = PromptKeyer(self.find, clock)
        self._pollers: dict[str, asyncio.Task[None]] = {}
        self._specs: Mapping[str, BackendSpec] = {}
        self._backends: tuple[BackendConfig, ...] = ()

    def client(self, name: str) -> UpstreamClient:
        return self.clients[name]

    def find(self, name: str) -> UpstreamClient | None:
        return self.clients.get(name)

    def subscribers(self) -> Mapping[str, KvEventSubscriber]:
        return {name: sub for name, (sub, _) in self.kv_events.items()}

    def apply(
        self,
        specs: Mapping[str, BackendSpec],
        scheduler: SchedulerConfig,
        backends: tuple[BackendConfig, ...],
    ) -> None:
        """Bring the pool to `specs`: a backend whose settings changed gets a new client and
        poller (its old client serves its requests under way to their end); the scheduler gets
        its policy and `backends`."""
        for name, spec in specs.items():
            if self._specs.get(name) == spec and name in self.clients:
                continue
            self._replace(name, self._specs.get(name), spec)
        for name in set(self.clients) - set(specs):
            self._drop(name)
        self._specs, self._backends = specs, backends
        self.scheduler.configure(scheduler, self._scheduler_backends())

    def _replace(self, name: str, before: BackendSpec | None, spec: BackendSpec) -> None:
        # Another setting changed: the same event stream is kept (a new subscription would miss,
        # uncounted, what is published while it joins). A stream changed or gone: what it said
        # the backend holds can no longer be taken back, so it is forgotten.
        same_stream = before is not None and (
            before.kv_events_endpoint,
            before.kv_events_bind,
        ) == (spec.kv_events_endpoint, spec.kv_events_bind)
        kept = self.kv_events.pop(name, None) if same_stream else None
        if before is not None and before.kv_events_endpoint and not same_stream:
            self.scheduler.cache_events(name, [AllBlocksCleared()])
        self._drop(name)
        conf = self.settings
        client = UpstreamClient(
            spec, conf, full=functools.partial(self.scheduler.backend_full, name)
        )
        self.clients[name] = client
        loop = asyncio.get_running_loop()
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
            self._pollers[name] = loop.create_task(poller.run(), name=f"poll-{name}")
        if kept is not None:
            self.kv_events[name] = kept
        elif spec.kv_events_endpoint:
            subscriber = KvEventSubscriber(
                name, spec.kv_events_endpoint, self.scheduler.cache_events, bind=spec.kv_events_bind
            )
            task = loop.create_task(subscriber.run(), name=f"kv-events-{name}")
            self.kv_events[name] = (subscriber, task)

    def _scheduler_backends(self) -> tuple[BackendConfig, ...]:
        return tuple(
            replace(b, preemption=False) if b.name in self.cannot_resume else b
            for b in self._backends
        )

    def stop_preempting(self, backend: str, why: str) -> bool:
        """`backend` refused to continue a paused stream: pausing there harms clients, so it
        stops for this process (until restart), loudly. Whether it was still on."""
        if backend in self.cannot_resume or backend not in self._specs:
            return False
        self.cannot_resume.add(backend)
        log.error(
            "backend %s refused to continue a paused stream (%s): preemption is off on it "
            "for this process; untick 'preemption' on the backend or fix the server",
            backend,
            why,
        )
        self.scheduler.configure(backends=self._scheduler_backends())
        return True

    def _drop(self, name: str) -> None:
        poller = self._pollers.pop(name, None)
        if poller is not None:
            poller.cancel()
        subscribed = self.kv_events.pop(name, None)
        if subscribed is not None:
            subscribed[1].cancel()
        client = self.clients.pop(name, None)
        if client is not None:
            client.retire()  # closed once the requests under way on it have ended

    async def aclose(self) -> None:
        tasks = [*self._pollers.values(), *(t for _, t in self.kv_events.values())]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._pollers.clear()
        self.kv_events.clear()
        for client in self.clients.values():
            await client.aclose()
        self.clients.clear()
