"""The simulator's /metrics: one engine's statistics under vLLM's, TGI's or SGLang's names.

Each simulator owns a private `CollectorRegistry` holding one collector that reads the engine on
every scrape. Names, types and labels follow the real expositions in `fixtures/metrics/`.
vLLM's default names are those vLLM 0.32 exports: `kv_cache_usage_perc` and
`inter_token_latency_seconds`, not the older `gpu_cache_usage_perc` and
`time_per_output_token_seconds` (`tests/vllm/test_vllm_sdk.py`,
`test_the_engine_exports_the_metric_names_the_gateway_reads_first`), which
`--legacy-metric-names` adds for the gateway's fallbacks.
Durations are wall-clock seconds as measured, so at `--speed s` they are the model's times / s.
Two simulator-only counters let a benchmark compute tokens/s and busy fraction for any format:
`simulator_generation_tokens_total` and `simulator_busy_seconds_total`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

from simulator.engine import Engine
from simulator.stats import FINISH_REASONS, Histogram

FORMATS = ("vllm", "tgi", "sglang")
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def _gauge(name: str, doc: str, labels: dict[str, str], value: float) -> GaugeMetricFamily:
    g = GaugeMetricFamily(name, doc, labels=list(labels))
    g.add_metric(list(labels.values()), value)
    return g


def _counter(
    name: str, doc: str, labels: dict[str, str], value: float, created: float | None
) -> CounterMetricFamily:
    c = CounterMetricFamily(name, doc, labels=list(labels))
    c.add_metric(list(labels.values()), value, created=created)
    return c


def _histogram(
    name: str, doc: str, labels: dict[str, str], h: Histogram, created: float | None
) -> HistogramMetricFamily:
    fam = HistogramMetricFamily(name, doc, labels=list(labels))
    fam.add_metric(list(labels.values()), h.cumulative(), h.total)
    if created is not None:
        fam.samples.append(Sample(f"{name}_created", labels, created))
    return fam


def _untyped(name: str, doc: str, rows: Iterable[tuple[dict[str, str], float]]) -> Metric:
    """TGI's Rust exporter writes counters without `_total`; prometheus_client cannot, so these
    are exposed untyped under TGI's exact sample names."""
    m = Metric(name, doc, "unknown")
    for labels, value in rows:
        m.add_sample(name, labels, value)
    return m


class SimulatorCollector(Collector):
    def __init__(self, engine: Engine, model: str, fmt: str, legacy_names: bool = False) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}")
        self.engine, self.model, self.fmt, self.legacy_names = engine, model, fmt, legacy_names
        self._builders: dict[str, Callable[[], Iterator[Metric]]] = {
            "vllm": self._vllm,
            "tgi": self._tgi,
            "sglang": self._sglang,
        }

    def collect(self) -> Iterator[Metric]:
        yield from self._builders[self.fmt]()
        s, created = self.engine.stats, self.engine.stats.created
        yield _counter(
            "simulator_generation_tokens", "Tokens generated.", {}, s.generation_tokens, created
        )
        yield _counter(
            "simulator_busy_seconds",
            "Wall time spent in engine steps.",
            {},
            s.busy_seconds,
            created,
        )
        yield _counter(
            "simulator_requests_received", "Requests the engine accepted.", {}, s.received, created
        )

    def _vllm(self) -> Iterator[Metric]:
        lab = {"engine": "0", "model_name": self.model}
        yield from self._vllm_gauges(lab)
        yield from self._vllm_counters(lab)
        yield from self._vllm_histograms(lab)

    def _vllm_gauges(self, lab: dict[str, str]) -> Iterator[Metric]:
        e = self.engine
        yield _gauge(
            "vllm:num_requests_running",
            "Number of requests in model execution batches.",
            lab,
            e.num_running,
        )
        yield _gauge(
            "vllm:num_requests_waiting",
            "Number of requests waiting to be processed.",
            lab,
            e.num_waiting,
        )
        by_reason = GaugeMetricFamily(
            "vllm:num_requests_waiting_by_reason",
            "Number of waiting requests by reason.",
            labels=[*lab, "reason"],
        )
        by_reason.add_metric([*lab.values(), "capacity"], e.num_waiting)
        by_reason.add_metric([*lab.values(), "deferred"], 0.0)
        yield by_reason
        kv_doc = "KV-cache usage. 1 means 100 percent usage."
        yield _gauge("vllm:kv_cache_usage_perc", kv_doc, lab, e.kv_cache_usage)
        if self.legacy_names:
            yield _gauge("vllm:gpu_cache_usage_perc", kv_doc, lab, e.kv_cache_usage)

    def _vllm_counters(self, lab: dict[str, str]) -> Iterator[Metric]:
        s, t0 = self.engine.stats, self.engine.stats.created
        yield _counter(
            "vllm:prefix_cache_queries",
            "Prefix cache queries, in terms of number of queried tokens.",
            lab,
            s.prefix_queries,
            t0,
        )
        yield _counter(
            "vllm:prefix_cache_hits",
            "Prefix cache hits, in terms of number of cached tokens.",
            lab,
            s.prefix_hits,
            t0,
        )
        yield _counter(
            "vllm:num_preemptions",
            "Cumulative number of preemption from the engine.",
            lab,
            s.preemptions,
            t0,
        )
        yield _counter(
            "vllm:prompt_tokens", "Number of prefill tokens processed.", lab, s.prompt_tokens, t0
        )
        yield _counter(
            "vllm:generation_tokens",
            "Number of generation tokens processed.",
            lab,
            s.generation_tokens,
            t0,
        )
        success = CounterMetricFamily(
            "vllm:request_success",
            "Count of successfully processed requests.",
            labels=[*lab, "finished_reason"],
        )
        for reason in FINISH_REASONS:
            success.add_metric([*lab.values(), reason], s.finished[reason], created=t0)
        yield success

    def _vllm_histograms(self, lab: dict[str, str]) -> Iterator[Metric]:
        s, t0 = self.engine.stats, self.engine.stats.created
        yield _histogram(
            "vllm:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            lab,
            s.ttft,
            t0,
        )
        yield _histogram(
            "vllm:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            lab,
            s.itl,
            t0,
        )
        if self.legacy_names:
            yield _histogram(
                "vllm:time_per_output_token_seconds",
                "Histogram of time per output token in seconds.",
                lab,
                s.itl,
                t0,
            )
        yield _histogram(
            "vllm:request_time_per_output_token_seconds",
            "Histogram of time_per_output_token_seconds per request.",
            lab,
            s.request_tpot,
            t0,
        )
        yield _histogram(
            "vllm:e2e_request_latency_seconds",
            "Histogram of e2e request latency in seconds.",
            lab,
            s.e2e,
            t0,
        )
        yield _histogram(
            "vllm:request_queue_time_seconds",
            "Histogram of time spent in WAITING phase for request.",
            lab,
            s.queue_time,
            t0,
        )
        yield _histogram(
            "vllm:request_prefill_time_seconds",
            "Histogram of time spent in PREFILL phase for request.",
            lab,
            s.prefill_time,
            t0,
        )
        yield _histogram(
            "vllm:request_prefill_kv_computed_tokens",
            "Histogram of new KV tokens computed during prefill (excluding cached tokens).",
            lab,
            s.prefill_computed,
            t0,
        )

    def _tgi(self) -> Iterator[Metric]:
        e, s = self.engine, self.engine.stats
        done = sum(s.finished[r] for r in FINISH_REASONS if r != "abort")
        yield _untyped("tgi_request_count", "Total number of requests", [({}, s.received)])
        yield _untyped("tgi_request_success", "Number of successful requests", [({}, done)])
        yield _untyped(
            "tgi_batch_inference_count",
            "Inference calls per method (prefill or decode)",
            [({"method": "decode"}, s.decode_steps), ({"method": "prefill"}, s.prefill_steps)],
        )
        yield _gauge(
            "tgi_batch_current_max_tokens",
            "Maximum tokens for the current batch",
            {},
            e.held_tokens,
        )
        yield _gauge("tgi_queue_size", "Current queue size", {}, e.num_waiting)
        yield _gauge("tgi_batch_max_total_tokens", "", {}, e.config.kv_capacity_tokens)
        yield _gauge("tgi_batch_current_size", "Current batch size", {}, e.num_running)
        yield _histogram(
            "tgi_request_mean_time_per_token_duration",
            "Mean time per token per request",
            {},
            s.request_tpot,
            None,
        )
        yield _histogram(
            "tgi_request_queue_duration", "Request queue duration", {}, s.queue_time, None
        )
        yield _histogram("tgi_request_duration", "Request duration", {}, s.e2e, None)

    def _sglang(self) -> Iterator[Metric]:
        rank = {
            "engine_type": "unified",
            "model_name": self.model,
            "moe_ep_rank": "0",
            "pp_rank": "0",
            "tp_rank": "0",
        }
        yield from self._sglang_gauges(rank)
        yield from self._sglang_counters_and_histograms(
            {"engine_type": "unified", "model_name": self.model}
        )

    def _sglang_gauges(self, rank: dict[str, str]) -> Iterator[Metric]:
        e, s = self.engine, self.engine.stats
        hit_rate = s.prefix_hits / s.prefix_queries if s.prefix_queries else 0.0
        yield _gauge(
            "sglang:num_running_reqs", "The number of running requests.", rank, e.num_running
        )
        yield _gauge(
            "sglang:num_queue_reqs",
            "The number of requests in the waiting queue.",
            rank,
            e.num_waiting,
        )
        yield _gauge("sglang:cache_hit_rate", "The prefix cache hit rate.", rank, hit_rate)
        yield _gauge("sglang:token_usage", "The token usage.", rank, e.kv_cache_usage)
        yield _gauge("sglang:num_used_tokens", "The number of used tokens.", rank, e.held_tokens)
        yield _gauge(
            "sglang:max_total_num_tokens",
            "The maximum number of tokens in the KV pool.",
            rank,
            e.config.kv_capacity_tokens,
        )

    def _sglang_counters_and_histograms(self, lab: dict[str, str]) -> Iterator[Metric]:
        s = self.engine.stats
        yield _counter(
            "sglang:num_aborted_requests",
            "Number of requests aborted.",
            lab,
            s.finished["abort"],
            None,
        )
        yield _counter(
            "sglang:prompt_tokens",
            "Number of prefill tokens processed.",
            lab,
            s.prompt_tokens,
            None,
        )
        yield _counter(
            "sglang:generation_tokens",
            "Number of generation tokens processed.",
            lab,
            s.generation_tokens,
            None,
        )
        yield _counter(
            "sglang:num_requests", "Number of requests processed.", lab, s.received, None
        )
        yield _counter(
            "sglang:cached_tokens",
            "Number of cached prompt tokens.",
            {**lab, "cache_source": "device"},
            s.prefix_hits,
            None,
        )
        yield from self._sglang_histograms(lab)

    def _sglang_histograms(self, lab: dict[str, str]) -> Iterator[Metric]:
        s = self.engine.stats
        yield _histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            lab,
            s.ttft,
            None,
        )
        yield _histogram(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            lab,
            s.itl,
            None,
        )
        if self.legacy_names:
            yield _histogram(
                "sglang:time_per_output_token_seconds",
                "Histogram of time per output token in seconds.",
                lab,
                s.request_tpot,
                None,
            )
        yield _histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            lab,
            s.e2e,
            None,
        )


def build_registry(
    engine: Engine, model: str, fmt: str, legacy_names: bool = False
) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(SimulatorCollector(engine, model, fmt, legacy_names))
    return registry


def render(registry: CollectorRegistry) -> bytes:
    return generate_latest(registry)
