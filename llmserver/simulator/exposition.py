"""The simulator's /metrics, under the real names of vLLM, TGI or SGLang.

Each simulator has its own registry. Gauges are read from the engine at scrape time; histograms
are observed as tokens and requests complete, like the real servers do.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from llmserver.simulator.engine import Engine, Sequence

LATENCY_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.15,
    0.2,
    0.3,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
)
TTFT_BUCKETS = (
    0.001,
    0.005,
    0.01,
    0.02,
    0.04,
    0.06,
    0.08,
    0.1,
    0.25,
    0.5,
    0.75,
    1.0,
    2.5,
    5.0,
    10.0,
    20.0,
    40.0,
    80.0,
)
FORMATS = ("vllm", "tgi", "sglang")


class _EngineGauges(Collector):
    def __init__(self, engine: Engine, fmt: str, labels: dict[str, str]) -> None:
        self.engine, self.fmt, self.labels = engine, fmt, labels

    def _gauge(self, name: str, doc: str, value: float) -> GaugeMetricFamily:
        family = GaugeMetricFamily(name, doc, labels=list(self.labels))
        family.add_metric(list(self.labels.values()), value)
        return family

    def collect(self) -> Iterator[GaugeMetricFamily | CounterMetricFamily]:
        e = self.engine
        if self.fmt == "vllm":
            yield self._gauge(
                "vllm:num_requests_running",
                "Number of requests in model execution batches.",
                len(e.running),
            )
            yield self._gauge(
                "vllm:num_requests_waiting",
                "Number of requests waiting to be processed.",
                e.waiting,
            )
            yield self._gauge(
                "vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", e.kv_usage
            )
            for name, value in (
                ("vllm:prefix_cache_queries", e.prefix_queries),
                ("vllm:prefix_cache_hits", e.prefix_hits),
            ):
                family = CounterMetricFamily(name, "Prefix cache tokens.", labels=list(self.labels))
                family.add_metric(list(self.labels.values()), value)
                yield family
        elif self.fmt == "tgi":
            yield GaugeMetricFamily("tgi_queue_size", "Queue size", value=e.waiting)
            yield GaugeMetricFamily(
                "tgi_batch_current_size", "Current batch size", value=len(e.running)
            )
            yield GaugeMetricFamily(
                "tgi_batch_current_max_tokens",
                "Tokens held",
                value=sum(s.held_tokens for s in e.running),
            )
            yield GaugeMetricFamily(
                "tgi_batch_max_total_tokens", "Token capacity", value=e.config.kv_capacity_tokens
            )
        else:
            yield self._gauge(
                "sglang:num_running_reqs", "The number of running requests.", len(e.running)
            )
            yield self._gauge(
                "sglang:num_queue_reqs", "The number of requests in the waiting queue.", e.waiting
            )
            yield self._gauge("sglang:token_usage", "The token usage.", e.kv_usage)
        busy = CounterMetricFamily(
            "simulator_busy_seconds", "Seconds the simulated engine spent in steps."
        )
        busy.add_metric([], e.busy_seconds)
        yield busy
        received = CounterMetricFamily(
            "simulator_requests_received", "Requests the engine accepted."
        )
        received.add_metric([], e.received)
        yield received


# attribute -> (buckets or None for a counter, help text, name per format; absent: not exposed).
# `itl` is observed per token; `tpot` once per request, as its mean time per output token.
SERIES: dict[str, tuple[tuple[float, ...] | None, str, dict[str, str]]] = {
    "itl": (
        LATENCY_BUCKETS,
        "Histogram of inter-token latency in seconds.",
        {
            "vllm": "vllm:inter_token_latency_seconds",
            "sglang": "sglang:inter_token_latency_seconds",
        },
    ),
    "tpot": (
        LATENCY_BUCKETS,
        "Histogram of time per output token per request.",
        {
            "vllm": "vllm:request_time_per_output_token_seconds",
            "tgi": "tgi_request_mean_time_per_token_duration",
        },
    ),
    "ttft": (
        TTFT_BUCKETS,
        "Histogram of time to first token in seconds (TGI: time spent queued).",
        {
            "vllm": "vllm:time_to_first_token_seconds",
            "sglang": "sglang:time_to_first_token_seconds",
            "tgi": "tgi_request_queue_duration",
        },
    ),
    "e2e": (
        TTFT_BUCKETS,
        "Histogram of end to end request latency in seconds.",
        {
            "vllm": "vllm:e2e_request_latency_seconds",
            "sglang": "sglang:e2e_request_latency_seconds",
            "tgi": "tgi_request_duration",
        },
    ),
    "prompt_tokens": (
        None,
        "Number of prefill tokens processed.",
        {
            "vllm": "vllm:prompt_tokens",
            "sglang": "sglang:prompt_tokens",
            "tgi": "tgi_request_input_count",
        },
    ),
    "generation_tokens": (
        None,
        "Number of generation tokens processed.",
        {
            "vllm": "vllm:generation_tokens",
            "sglang": "sglang:generation_tokens",
            "tgi": "tgi_request_generated_tokens",
        },
    ),
}
SUCCESS = {
    "vllm": "vllm:request_success",
    "sglang": "sglang:num_requests",
    "tgi": "tgi_request_success",
}
LABELS = {
    "vllm": {"engine": "0"},
    "sglang": {"engine_type": "unified", "tp_rank": "0"},
    "tgi": {},
}


class Exposition:
    """Owns the registry and the observation hooks the engine calls."""

    def __init__(self, engine: Engine, fmt: str, model: str) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}")
        self.fmt = fmt
        self.registry = CollectorRegistry()
        self.labels = {**LABELS[fmt], "model_name": model} if fmt != "tgi" else {}
        self.registry.register(_EngineGauges(engine, fmt, self.labels))
        self.series: dict[str, Any] = {}
        for attr, (buckets, doc, names) in SERIES.items():
            if fmt not in names:
                continue
            if buckets is None:
                metric: Any = Counter(names[fmt], doc, list(self.labels), registry=self.registry)
            else:
                metric = Histogram(
                    names[fmt], doc, list(self.labels), buckets=buckets, registry=self.registry
                )
            self.series[attr] = metric.labels(**self.labels) if self.labels else metric
        # TGI counts successes only; vLLM and SGLang label every finish with its reason.
        reason = [] if fmt == "tgi" else ["finished_reason"]
        self._success = Counter(
            SUCCESS[fmt],
            "Count of finished requests.",
            [*self.labels, *reason],
            registry=self.registry,
        )

    def _observe(self, attr: str, value: float) -> None:
        metric = self.series.get(attr)
        if metric is not None:
            metric.observe(value)

    def on_token(self, seq: Sequence, now: float) -> None:
        self.series["generation_tokens"].inc()
        if seq.last_token is None:
            start = (seq.admitted or now) if self.fmt == "tgi" else now
            self._observe("ttft", start - seq.arrived)
        else:
            self._observe("itl", now - seq.last_token)

    def on_finish(self, seq: Sequence, reason: str) -> None:
        if seq.admitted is not None:
            self.series["prompt_tokens"].inc(seq.prompt_tokens)
        if self.fmt != "tgi":
            self._success.labels(**self.labels, finished_reason=reason).inc()
        elif reason != "abort":
            self._success.inc()
        if seq.first_token is not None and seq.last_token is not None:
            if seq.generated > 1:
                self._observe("tpot", (seq.last_token - seq.first_token) / (seq.generated - 1))
            self._observe("e2e", seq.last_token - seq.arrived)

    def render(self) -> bytes:
        return generate_latest(self.registry)
