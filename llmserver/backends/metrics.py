"""Backend Prometheus text -> `scheduling.backend_state.BackendMetrics`, per backend kind.

Parsing is prometheus-client's own text parser. Each kind maps its metric names onto the fields,
trying current names before old ones (vLLM renamed `gpu_cache_usage_perc` and
`time_per_output_token_seconds`). Rules, chosen once here:

1. waiting / running: summed over every label set (several engines or models behind one URL).
2. KV-cache usage: the highest over label sets, because one full engine already preempts.
   TGI has no usage gauge; it is `tgi_batch_current_max_tokens / tgi_batch_max_total_tokens`.
3. TPOT and TTFT: mean over the last window, delta(sum) / delta(count) of the histogram between
   this scrape and the previous one. None when the window saw no new observations (no evidence of
   slowness) and on the first scrape. A count that went down means the backend restarted: the
   window is then everything since the restart.
4. A missing series leaves its field None; an unknown kind has no mapping and is refused.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from prometheus_client.parser import text_string_to_metric_families

from scheduling.backend_state import BackendMetrics


@dataclass(frozen=True, slots=True)
class MetricNames:
    waiting: tuple[str, ...] = ()
    running: tuple[str, ...] = ()
    kv_cache_usage: tuple[str, ...] = ()
    kv_tokens_used: str | None = None
    kv_tokens_total: str | None = None
    tpot: tuple[str, ...] = ()
    ttft: tuple[str, ...] = ()


NAMES: dict[str, MetricNames] = {
    "vllm": MetricNames(
        waiting=("vllm:num_requests_waiting",),
        running=("vllm:num_requests_running",),
        kv_cache_usage=("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
        tpot=("vllm:inter_token_latency_seconds", "vllm:time_per_output_token_seconds"),
        ttft=("vllm:time_to_first_token_seconds",),
    ),
    "tgi": MetricNames(
        waiting=("tgi_queue_size",),
        running=("tgi_batch_current_size",),
        kv_tokens_used="tgi_batch_current_max_tokens",
        kv_tokens_total="tgi_batch_max_total_tokens",
        tpot=("tgi_request_mean_time_per_token_duration",),
    ),
    "sglang": MetricNames(
        waiting=("sglang:num_queue_reqs",),
        running=("sglang:num_running_reqs",),
        kv_cache_usage=("sglang:token_usage",),
        tpot=("sglang:inter_token_latency_seconds", "sglang:time_per_output_token_seconds"),
        ttft=("sglang:time_to_first_token_seconds",),
    ),
}
SCRAPED_KINDS = tuple(NAMES)


@dataclass(slots=True)
class Exposition:
    """Gauge values per label set and histogram (sum, count) totals, by family name."""

    gauges: dict[str, list[float]] = field(default_factory=dict)
    histograms: dict[str, tuple[float, float]] = field(default_factory=dict)


def parse_exposition(text: str) -> Exposition:
    """Raises ValueError on text that is not Prometheus exposition format."""
    out = Exposition()
    for family in text_string_to_metric_families(text):
        if family.type == "histogram":
            total = sum(s.value for s in family.samples if s.name == f"{family.name}_sum")
            count = sum(s.value for s in family.samples if s.name == f"{family.name}_count")
            out.histograms[family.name] = (total, count)
        elif family.type in ("gauge", "unknown", "untyped"):
            values = [s.value for s in family.samples if s.name == family.name]
            if values:
                out.gauges[family.name] = values
    return out


def _first(expo: Exposition, names: tuple[str, ...]) -> list[float] | None:
    for name in names:
        if name in expo.gauges:
            return expo.gauges[name]
    return None


def _window_mean(prev: tuple[float, float] | None, now: tuple[float, float]) -> float | None:
    if prev is None:
        return None
    d_sum, d_count = now[0] - prev[0], now[1] - prev[1]
    if d_count < 0:  # counters reset: the backend restarted
        d_sum, d_count = now
    return d_sum / d_count if d_count > 0 else None


class MetricsReader:
    """Turns consecutive scrapes of one backend into BackendMetrics; keeps the previous
    histogram totals, so one reader belongs to one backend."""

    def __init__(self, kind: str) -> None:
        if kind not in NAMES:
            raise ValueError(f"no metrics mapping for backend kind {kind!r}")
        self.kind, self.names = kind, NAMES[kind]
        self._previous: dict[str, tuple[float, float]] = {}

    def read(self, text: str, scraped_at: float) -> BackendMetrics:
        expo = parse_exposition(text)
        waiting = _first(expo, self.names.waiting)
        running = _first(expo, self.names.running)
        return BackendMetrics(
            waiting=float(sum(waiting)) if waiting is not None else None,
            running=float(sum(running)) if running is not None else None,
            kv_cache_usage=self._kv_usage(expo),
            tpot_seconds=self._window(expo, self.names.tpot),
            ttft_seconds=self._window(expo, self.names.ttft),
            healthy=True,
            scraped_at=scraped_at,
        )

    def _kv_usage(self, expo: Exposition) -> float | None:
        usage = _first(expo, self.names.kv_cache_usage)
        if usage is not None:
            return float(max(usage))
        used = expo.gauges.get(self.names.kv_tokens_used or "")
        total = expo.gauges.get(self.names.kv_tokens_total or "")
        if used and total and sum(total) > 0:
            return min(1.0, sum(used) / sum(total))
        return None

    def _window(self, expo: Exposition, names: tuple[str, ...]) -> float | None:
        for name in names:
            if name in expo.histograms:
                now = expo.histograms[name]
                mean = _window_mean(self._previous.get(name), now)
                self._previous[name] = now
                return mean
        return None
