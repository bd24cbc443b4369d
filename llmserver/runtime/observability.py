"""The gateway's own Prometheus metrics: what it served, how long people waited, gate states.

Request counters and histograms are updated on the request path; queue depths, gate states and
the backends' scraped values are read from the scheduler's snapshot at scrape time by a
collector, so they cost nothing between scrapes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from llmserver.runtime.usage import UsageWriter
from scheduling import SchedulerSnapshot

if TYPE_CHECKING:
    from llmserver.backends.kv_events import KvEventSubscriber

SCRAPED_FIELDS = ("waiting", "running", "kv_cache_usage", "tpot_seconds", "ttft_seconds", "healthy")
_WAIT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300)


class SnapshotCollector(Collector):
    """Reads the scheduler's snapshot and the usage writer at scrape time."""

    def __init__(self, snapshot: Callable[[], SchedulerSnapshot], usage: UsageWriter) -> None:
        self._snapshot = snapshot
        self._usage = usage

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        yield self._queue_depth(snap)
        yield from self._backend_metrics(snap)
        yield from self._usage_metrics()

    @staticmethod
    def _queue_depth(snap: SchedulerSnapshot) -> Metric:
        depth = GaugeMetricFamily(
            "llmserver_queue_depth", "Jobs waiting, by model and band.", labels=["model", "band"]
        )
        totals: dict[tuple[str, str], int] = {}
        for q in snap.queues:
            key = (q.model, str(q.band))
            totals[key] = totals.get(key, 0) + q.depth
        for (model, band), value in sorted(totals.items()):
            depth.add_metric([model, band], value)
        return depth

    @staticmethod
    def _backend_metrics(snap: SchedulerSnapshot) -> Iterator[Metric]:
        gate = GaugeMetricFamily(
            "llmserver_gate_open",
            "1 while the backend's gate is open for the band.",
            labels=["backend", "band"],
        )
        in_flight = GaugeMetricFamily(
            "llmserver_backend_in_flight", "Requests in flight.", labels=["backend"]
        )
        scraped = GaugeMetricFamily(
            "llmserver_backend_metric",
            "The backend's last scraped values.",
            labels=["backend", "name"],
        )
        capacity = GaugeMetricFamily(
            "llmserver_backend_capacity",
            "Requests the backend runs at once (configured or learned).",
            labels=["backend"],
        )
        max_in_flight = GaugeMetricFamily(
            "llmserver_backend_max_in_flight", "Configured in-flight limit.", labels=["backend"]
        )
        costs = GaugeMetricFamily(
            "llmserver_backend_cost_seconds",
            "The backend's learned costs: seconds per decode step (step) and per prompt token "
            "prefilled (prefill_per_token), what a pause is weighed by.",
            labels=["backend", "name"],
        )
        stale = GaugeMetricFamily(
            "llmserver_backend_stale",
            "1 while the backend's scraped metrics are older than METRICS_STALE_AFTER.",
            labels=["backend"],
        )
        for b in snap.backends:
            in_flight.add_metric([b.name], b.in_flight)
            if b.capacity is not None:
                capacity.add_metric([b.name], b.capacity)
            max_in_flight.add_metric([b.name], b.max_in_flight)
            stale.add_metric([b.name], 1.0 if b.stale else 0.0)
            if b.step_seconds is not None:
                costs.add_metric([b.name, "step"], b.step_seconds)
            if b.prefill_seconds_per_token is not None:
                costs.add_metric([b.name, "prefill_per_token"], b.prefill_seconds_per_token)
            for g in b.gates:
                gate.add_metric([b.name, str(g.band)], 1.0 if g.open else 0.0)
            if b.metrics is not None:
                for name in SCRAPED_FIELDS:
                    value = getattr(b.metrics, name)
                    if value is not None:
                        scraped.add_metric([b.name, name], float(value))
        yield gate
        yield in_flight
        yield capacity
        yield max_in_flight
        yield stale
        yield scraped
        yield costs
        decisions = CounterMetricFamily(
            "llmserver_preemption_decisions",
            "Preemption's decisions for jobs waiting on full backends, by reason "
            "(evict_pays, evict_costs_unknown, wait_for_completion).",
            labels=["reason"],
        )
        for reason, count in sorted(snap.preemption.items()):
            decisions.add_metric([reason], count)
        yield decisions

    def _usage_metrics(self) -> Iterator[Metric]:
        pending = GaugeMetricFamily(
            "llmserver_usage_pending", "Usage records waiting to be written."
        )
        pending.add_metric([], self._usage.pending)
        yield pending
        cost = CounterMetricFamily(
            "llmserver_cost",
            "Cost of the usage rows written, by tenant, in the cost rules' currency.",
            labels=["tenant"],
        )
        for tenant, spent in sorted(self._usage.cost_by_tenant.items()):
            cost.add_metric([tenant], float(spent))
        yield cost
        # Rows the database refused even alone (logged with their request id); not retried.
        yield CounterMetricFamily(
            "llmserver_usage_failed",
            "Usage records that could not be written and were dropped.",
            value=self._usage.failed,
        )


class KvEventsCollector(Collector):
    """Per backend publishing KV cache events: batches heard, missed (sequence gaps) and refused
    as malformed. Missed or malformed batches mean the prefix index lacks what they said."""

    def __init__(self, subscribers: Callable[[], Mapping[str, KvEventSubscriber]]) -> None:
        self._subscribers = subscribers

    def collect(self) -> Iterator[Metric]:
        batches = CounterMetricFamily(
            "llmserver_kv_event_batches",
            "KV cache event batches from each backend, by outcome (received, missed, malformed).",
            labels=["backend", "outcome"],
        )
        for name, sub in sorted(self._subscribers().items()):
            batches.add_metric([name, "received"], sub.received)
            batches.add_metric([name, "missed"], sub.missed)
            batches.add_metric([name, "malformed"], sub.malformed)
        yield batches


class GatewayMetrics:
    def __init__(self, snapshot: Callable[[], SchedulerSnapshot], usage: UsageWriter) -> None:
        self.registry = CollectorRegistry()
        self.registry.register(SnapshotCollector(snapshot, usage))
        self.requests = self._counter(
            "llmserver_requests",
            "Requests by model, band and final status.",
            ["model", "band", "status"],
        )
        self.queue_wait = self._histogram(
            "llmserver_queue_wait_seconds",
            "Time from arrival to dispatch.",
            ["band"],
        )
        self.ttft = self._histogram(
            "llmserver_time_to_first_token_seconds",
            "Time from arrival to the first streamed token.",
            ["band"],
        )
        self.duration = self._histogram(
            "llmserver_request_duration_seconds",
            "Time from arrival to the last byte, by band and model (configured models only).",
            ["band", "model"],
        )
        self.tenant_queue_wait = self._histogram(
            "llmserver_tenant_queue_wait_seconds",
            "Time from arrival to dispatch, by tenant (configured tenants only).",
            ["tenant"],
        )
        self.upstream_errors = self._counter(
            "llmserver_upstream_errors",
            "Backend failures by backend and kind (http_4xx, http_5xx, transport).",
            ["backend", "kind"],
        )
        self.resume_refused = self._counter(
            "llmserver_resume_refused",
            "Paused streams a backend refused to continue; preemption is then off on it.",
            ["backend"],
        )
        self.preemptions = self._counter(
            "llmserver_preemptions",
            "Running jobs evicted to make room, by band and kind (before_first_token: restarted "
            "from the queue; resumable: the client's stream continued later; recalled: called "
            "back from the engine's own queue before it started, which is no eviction).",
            ["band", "kind"],
        )
        self.tokens = self._counter(
            "llmserver_tokens",
            "Tokens by tenant and kind (prompt or completion).",
            ["tenant", "kind"],
        )

    def _counter(self, name: str, doc: str, labels: list[str]) -> Counter:
        return Counter(name, doc, labels, registry=self.registry)

    def _histogram(self, name: str, doc: str, labels: list[str]) -> Histogram:
        return Histogram(name, doc, labels, buckets=_WAIT_BUCKETS, registry=self.registry)

    def render(self) -> bytes:
        return generate_latest(self.registry)
