"""Backend metrics: parse a Prometheus exposition and map each kind's names onto one state.

Parsing uses prometheus-client's text parser, on only the lines of the families the kind reads:
an engine's exposition is mostly histogram buckets nobody here uses (vLLM's runs to hundreds of
kilobytes), and parsing it whole cost 5 ms of the event loop per scrape of the simulator's 18 kB.
Gauges are summed over label sets (engines, ranks).
Time per output token, time to first token and prefill seconds per prompt token are means over
the last scrape window, from the deltas of the histogram's sum and count between two scrapes (or
of a seconds counter and a tokens counter), never the all-time mean; a window with no new
observations gives None (no evidence of slowness).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import replace

import httpx
from prometheus_client.parser import text_string_to_metric_families

from scheduling import BackendMetrics
from tenants.backend_kinds import profile

log = logging.getLogger(__name__)


_SUFFIXES = ("", "_sum", "_count", "_total")


def wanted_lines(text: str, families: frozenset[str]) -> str:
    """The lines of `text` that belong to `families` (base names: a histogram's `_sum` and
    `_count`, a counter's `_total`, and their `# TYPE`/`# HELP` lines come along). Label values
    cannot hold a raw newline (the exposition escapes it), so a line is a sample or a comment."""
    starts = _starts(families)
    return "\n".join(line for line in text.splitlines() if line.startswith(starts))


@functools.cache
def _starts(families: frozenset[str]) -> tuple[str, ...]:
    names = [f + suffix for f in sorted(families) for suffix in _SUFFIXES]
    samples = [name + end for name in names for end in ("{", " ")]
    comments = [f"# {kind} {name} " for name in names for kind in ("TYPE", "HELP")]
    return (*samples, *comments)


def parse_samples(
    text: str, highest: frozenset[str] = frozenset(), families: frozenset[str] | None = None
) -> dict[str, float]:
    """Sample name -> value summed over label sets (engines, ranks), or the highest of them for
    the names in `highest` (a usage fraction does not add up). Buckets and `_created` left out;
    with `families`, everything outside them too (`wanted_lines`)."""
    if families is not None:
        text = wanted_lines(text, families)
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name.endswith(("_bucket", "_created")):
                continue
            value, seen = float(sample.value), values.get(sample.name)
            if seen is None:
                values[sample.name] = value
            elif sample.name in highest:
                values[sample.name] = max(seen, value)
            else:
                values[sample.name] = seen + value
    return values


def _first(values: dict[str, float], names: tuple[str, ...]) -> float | None:
    for name in names:
        if name in values:
            return values[name]
    return None


def _histogram(values: dict[str, float], names: tuple[str, ...]) -> tuple[float, float] | None:
    for name in names:
        if name + "_count" in values and name + "_sum" in values:
            return values[name + "_sum"], values[name + "_count"]
    return None


def _pair(values: dict[str, float], names: tuple[str, str] | None) -> tuple[float, float] | None:
    """Two growing samples read together, (seconds, tokens), where both are present."""
    if names is None:
        return None
    seconds, tokens = (values.get(name) for name in names)
    return (seconds, tokens) if seconds is not None and tokens is not None else None


def window_mean(
    previous: tuple[float, float] | None, current: tuple[float, float] | None
) -> float | None:
    if previous is None or current is None:
        return None
    d_sum, d_count = current[0] - previous[0], current[1] - previous[1]
    if d_count <= 0 or d_sum < 0:
        return None  # no new observations, or the backend restarted and its counters reset
    return d_sum / d_count


class MetricsReader:
    """Turns successive scrapes of one backend into `BackendMetrics`; keeps the last histograms."""

    def __init__(self, kind: str) -> None:
        names = profile(kind).metrics
        if names is None:
            raise ValueError(f"backend kind {kind!r} exports no metrics the gateway reads")
        self.names = names
        self._families = self.names.families()
        self._tpot: tuple[float, float] | None = None
        self._ttft: tuple[float, float] | None = None
        self._prefill: tuple[float, float] | None = None

    def read(self, text: str, now: float) -> BackendMetrics:
        values = parse_samples(text, frozenset(self.names.kv_usage), self._families)
        n = self.names
        kv = _first(values, n.kv_usage)
        if kv is None and n.kv_used_over_total is not None:
            used, total = (values.get(name) for name in n.kv_used_over_total)
            kv = used / total if used is not None and total else None
        tpot, ttft = _histogram(values, n.tpot), _histogram(values, n.ttft)
        if tpot is None:
            tpot = _pair(values, n.tpot_counters)
        prefill = _pair(values, n.prefill)
        metrics = BackendMetrics(
            waiting=_first(values, n.waiting),
            running=_first(values, n.running),
            kv_cache_usage=kv,
            tpot_seconds=window_mean(self._tpot, tpot),
            ttft_seconds=window_mean(self._ttft, ttft),
            healthy=True,
            scraped_at=now,
            prefill_seconds_per_token=window_mean(self._prefill, prefill),
        )
        self._tpot, self._ttft, self._prefill = tpot, ttft, prefill
        return metrics


class MetricsPoller:
    """Scrapes one backend on an interval; after `failures_before_unhealthy` failures in a row it
    reports the backend unhealthy, and the next good scrape brings it back. With `read_capacity`
    (llama.cpp's /props) it also reports how many sequences the server runs at once, read once
    and again after a failed scrape."""

    def __init__(
        self,
        name: str,
        kind: str,
        url: str,
        client: httpx.AsyncClient,
        on_metrics: Callable[[str, BackendMetrics], None],
        read_capacity: Callable[[], Awaitable[int | None]] | None = None,
        interval: float = 0.25,
        timeout: float = 1.0,
        failures_before_unhealthy: int = 3,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.name, self.url, self.client = name, url, client
        self.reader = MetricsReader(kind)
        self.on_metrics = on_metrics
        self.read_capacity = read_capacity
        self.capacity: int | None = None
        self.interval, self.timeout = interval, timeout
        self.failures_before_unhealthy = failures_before_unhealthy
        self.clock = clock
        self.failures = 0

    async def scrape_once(self) -> BackendMetrics | None:
        try:
            # Asking for OpenMetrics would change vLLM's answer format.
            response = await self.client.get(
                self.url, headers={"accept": "text/plain"}, timeout=self.timeout
            )
            response.raise_for_status()
            metrics = self.reader.read(response.text, self.clock())
        except (httpx.HTTPError, ValueError) as exc:
            self.failures += 1
            log.debug("scraping %s failed (%d in a row): %r", self.name, self.failures, exc)
            self.capacity = None  # a restarted server may run another number of slots
            if self.failures < self.failures_before_unhealthy:
                return None
            metrics = BackendMetrics(healthy=False, scraped_at=self.clock())
        else:
            self.failures = 0
            if self.read_capacity is not None:
                if self.capacity is None:
                    self.capacity = await self.read_capacity()
                metrics = replace(metrics, capacity=self.capacity)
        self.on_metrics(self.name, metrics)
        return metrics

    async def run(self) -> None:
        while True:
            started = self.clock()
            await self.scrape_once()
            await asyncio.sleep(max(0.0, self.interval - (self.clock() - started)))
