"""The metrics reader maps each kind's real exposition onto BackendMetrics, and computes TPOT
and TTFT over the window between two scrapes, never the all-time mean."""

from __future__ import annotations

import pytest
from backend_helpers import fixture_text

from llmserver.backends.metrics import MetricsReader
from llmserver.backends.simulator.engine import Engine, EngineConfig
from llmserver.backends.simulator.exposition import build_registry, render


@pytest.mark.parametrize(
    ("kind", "fixture", "waiting", "running", "kv"),
    [
        ("vllm", "vllm_v1.txt", 2.0, 3.0, 0.18341708542713567),
        ("tgi", "tgi.txt", 2.0, 3.0, 1946 / 149504),
        ("sglang", "sglang.txt", 3.0, 14.0, 0.27),
    ],
)
def test_real_expositions_map_onto_backend_metrics(kind, fixture, waiting, running, kv) -> None:
    m = MetricsReader(kind).read(fixture_text(fixture), scraped_at=7.0)
    assert (m.waiting, m.running, m.healthy, m.scraped_at) == (waiting, running, True, 7.0)
    assert m.kv_cache_usage == pytest.approx(kv)


def test_the_first_scrape_has_no_tpot_window() -> None:
    m = MetricsReader("vllm").read(fixture_text("vllm_v1.txt"), 0.0)
    assert m.tpot_seconds is None and m.ttft_seconds is None


def _bump(text: str, name: str, d_sum: float, d_count: float) -> str:
    """The same exposition with `d_sum` / `d_count` more observations on histogram `name`."""
    out = []
    for line in text.splitlines():
        if line.startswith((f"{name}_sum", f"{name}_count")):
            head, value = line.rsplit(" ", 1)
            delta = d_sum if line.startswith(f"{name}_sum") else d_count
            line = f"{head} {float(value) + delta}"
        out.append(line)
    return "\n".join(out) + "\n"


@pytest.mark.parametrize(
    ("kind", "fixture", "name"),
    [
        ("vllm", "vllm_v1.txt", "vllm:inter_token_latency_seconds"),
        ("tgi", "tgi.txt", "tgi_request_mean_time_per_token_duration"),
        ("sglang", "sglang.txt", "sglang:inter_token_latency_seconds"),
    ],
)
def test_tpot_is_the_mean_of_the_window_between_two_scrapes(kind, fixture, name) -> None:
    reader = MetricsReader(kind)
    first = fixture_text(fixture)
    reader.read(first, 0.0)
    m = reader.read(_bump(first, name, d_sum=2.0, d_count=10), 1.0)
    assert m.tpot_seconds == pytest.approx(0.2)


def test_a_window_without_new_observations_has_no_tpot() -> None:
    reader = MetricsReader("vllm")
    reader.read(fixture_text("vllm_v1.txt"), 0.0)
    assert reader.read(fixture_text("vllm_v1.txt"), 1.0).tpot_seconds is None


def test_a_restarted_backend_uses_everything_since_the_restart() -> None:
    reader = MetricsReader("vllm")
    reader.read(fixture_text("vllm_v1.txt"), 0.0)
    fresh = Engine(EngineConfig())
    fresh.stats.itl.observe(0.1)
    fresh.stats.itl.observe(0.1)
    text = render(build_registry(fresh, "meta-llama/Llama-3.1-8B-Instruct", "vllm")).decode()
    assert reader.read(text, 1.0).tpot_seconds == pytest.approx(0.1)


def test_old_vllm_names_are_read_when_the_new_ones_are_missing() -> None:
    engine = Engine(EngineConfig(kv_capacity_tokens=100))
    text = render(build_registry(engine, "m", "vllm", legacy_names=True)).decode()
    old_only = "\n".join(
        line
        for line in text.splitlines()
        if "kv_cache_usage_perc" not in line and "inter_token_latency" not in line
    )
    reader = MetricsReader("vllm")
    reader.read(old_only, 0.0)
    engine.stats.itl.observe(0.05)
    engine.stats.itl.observe(0.15)
    second = render(build_registry(engine, "m", "vllm", legacy_names=True)).decode()
    second = "\n".join(x for x in second.splitlines() if "inter_token_latency" not in x)
    m = reader.read(second, 1.0)
    assert m.kv_cache_usage == 0.0
    assert m.tpot_seconds == pytest.approx(0.1)


def test_missing_series_leave_fields_empty() -> None:
    m = MetricsReader("vllm").read("# TYPE other gauge\nother 1\n", 0.0)
    assert (m.waiting, m.running, m.kv_cache_usage, m.tpot_seconds) == (None, None, None, None)
    assert m.healthy


def test_text_that_is_not_prometheus_is_refused() -> None:
    with pytest.raises(ValueError):
        MetricsReader("vllm").read("<html>oops</html> {", 0.0)


def test_a_kind_without_metrics_has_no_reader() -> None:
    with pytest.raises(ValueError):
        MetricsReader("openai")


@pytest.mark.parametrize("fmt", ["vllm", "tgi", "sglang"])
def test_the_simulators_own_output_reads_back_with_window_tpot(fmt) -> None:
    engine = Engine(EngineConfig(kv_capacity_tokens=1000))
    registry = build_registry(engine, "demo-llama", fmt)
    reader = MetricsReader(fmt)
    reader.read(render(registry).decode(), 0.0)
    for value in (0.02, 0.04):
        engine.stats.itl.observe(value)
        engine.stats.request_tpot.observe(value)
    m = reader.read(render(registry).decode(), 1.0)
    assert (m.waiting, m.running) == (0.0, 0.0)
    assert m.tpot_seconds == pytest.approx(0.03)
