"""The simulator's /metrics, under the real names of vLLM, TGI or SGLang.

Each simulator has its own registry. Gauges are read from the engine at scrape time; histograms
are observed as tokens and requests complete, like the real servers do.
"""

from __future__ import annotations

from collections.abc import Iterator

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


class Exposition:
    """Owns the registry and the observation hooks the engine calls."""

    def __init__(self, engine: Engine, fmt: str, model: str) -> None:
        if fmt not in FORMATS:
            raise ValueError(f"format must be one of {FORMATS}")
        self.fmt = fmt
        self.registry = CollectorRegistry()
        if fmt == "vllm":
            labels = {"engine": "0", "model_name": model}
        elif fmt == "sglang":
            labels = {"engine_type": "unified", "model_name": model, "tp_rank": "0"}
        else:
            labels = {}
        self.labels = labels
        names = list(labels)
        self.registry.register(_EngineGauges(engine, fmt, labels))
        prefix = {"vllm": "vllm:", "sglang": "sglang:", "tgi": "tgi_"}[fmt]
        if fmt == "tgi":
            self.itl = Histogram(
                "tgi_request_mean_time_per_token_duration",
                "Mean time per token per request",
                buckets=LATENCY_BUCKETS,
                registry=self.registry,
            )
            self.ttft = Histogram(
                "tgi_request_queue_duration",
                "Time spent in the queue per request",
                buckets=TTFT_BUCKETS,
                registry=self.registry,
            )
            self.tpot = None
            self.prompt_tokens = Counter(
                "tgi_request_input_count", "Input tokens", registry=self.registry
            )
            self.generation_tokens = Counter(
                "tgi_request_generated_tokens", "Generated tokens", registry=self.registry
            )
            self.success = Counter(
                "tgi_request_success", "Successful requests", registry=self.registry
            )
            self.e2e = Histogram(
                "tgi_request_duration",
                "Request duration",
                buckets=TTFT_BUCKETS,
                registry=self.registry,
            )
            return
        self.itl = Histogram(
            prefix + "inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            names,
            buckets=LATENCY_BUCKETS,
            registry=self.registry,
        ).labels(**labels)
        self.tpot = (
            Histogram(
                "vllm:request_time_per_output_token_seconds",
                "Histogram of time per output token per request.",
                names,
                buckets=LATENCY_BUCKETS,
                registry=self.registry,
            ).labels(**labels)
            if fmt == "vllm"
            else None
        )
        self.ttft = Histogram(
            prefix + "time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            names,
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        ).labels(**labels)
        self.e2e = Histogram(
            prefix + "e2e_request_latency_seconds",
            "Histogram of end to end request latency in seconds.",
            names,
            buckets=TTFT_BUCKETS,
            registry=self.registry,
        ).labels(**labels)
        self.prompt_tokens = Counter(
            prefix + "prompt_tokens",
            "Number of prefill tokens processed.",
            names,
            registry=self.registry,
        ).labels(**labels)
        self.generation_tokens = Counter(
            prefix + "generation_tokens",
            "Number of generation tokens processed.",
            names,
            registry=self.registry,
        ).labels(**labels)
        success_name = prefix + ("request_success" if fmt == "vllm" else "num_requests")
        self._success = Counter(
            success_name,
            "Count of finished requests.",
            [*names, "finished_reason"],
            registry=self.registry,
        )
        self.success = None

    def on_token(self, seq: Sequence, now: float) -> None:
        self.generation_tokens.inc()
        if seq.last_token is None:
            # TGI has no TTFT histogram; its queue duration is the closest it exposes.
            start = (seq.admitted or now) if self.fmt == "tgi" else now
            self.ttft.observe(start - seq.arrived)
        else:
            self.itl.observe(now - seq.last_token)

    def on_finish(self, seq: Sequence, reason: str) -> None:
        self.prompt_tokens.inc(seq.prompt_tokens if seq.admitted is not None else 0)
        if self.fmt == "tgi":
            if reason != "abort":
                self.success.inc()
                if seq.first_token is not None and seq.last_token is not None and seq.generated > 1:
                    self.itl.observe((seq.last_token - seq.first_token) / (seq.generated - 1))
            return
        self._success.labels(**self.labels, finished_reason=reason).inc()
        if (
            self.tpot is not None
            and seq.first_token is not None
            and seq.last_token is not None
            and seq.generated > 1
        ):
            self.tpot.observe((seq.last_token - seq.first_token) / (seq.generated - 1))
        if seq.last_token is not None:
            self.e2e.observe(seq.last_token - seq.arrived)

    def render(self) -> bytes:
        return generate_latest(self.registry)
