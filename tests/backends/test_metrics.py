"""Backend metrics: each kind's names onto one state, TPOT over the last window only."""

from __future__ import annotations

from pathlib import Path

import httpx
import pytest

from llmserver.backends.metrics import (
    MetricsPoller,
    MetricsReader,
    parse_samples,
    window_mean,
)
from scheduling import BackendMetrics
from simulator.launcher import start_simulator
from tenants.backend_kinds import profile

# Copies of shared/fixtures/metrics: real expositions of vLLM v1, TGI and SGLang.
FIXTURES = Path(__file__).resolve().parent / "fixtures"


def fixture(name: str) -> str:
    return (FIXTURES / name).read_text()


@pytest.mark.parametrize(
    ("kind", "name", "expected"),
    [
        ("vllm", "vllm_v1.txt", (2.0, 3.0, 0.18341708542713567)),
        ("tgi", "tgi.txt", (2.0, 3.0, None)),
        ("sglang", "sglang.txt", (3.0, 14.0, 0.27)),
        ("llamacpp", "llamacpp.txt", (2.0, 4.0, None)),
    ],
)
def test_it_reads_each_kinds_real_exposition(kind, name, expected):
    m = MetricsReader(kind).read(fixture(name), now=5.0)
    assert (m.waiting, m.running) == expected[:2]
    if expected[2] is not None:
        assert m.kv_cache_usage == pytest.approx(expected[2])
    elif kind == "llamacpp":
        assert m.kv_cache_usage is None  # llama-server does not expose it
    else:
        assert 0 < m.kv_cache_usage < 1
    assert m.healthy and m.scraped_at == 5.0


def test_the_first_scrape_has_no_window_yet():
    m = MetricsReader("vllm").read(fixture("vllm_v1.txt"), now=1.0)
    assert m.tpot_seconds is None and m.ttft_seconds is None


def exposition(itl_sum: float, itl_count: float, old_names: bool = False) -> str:
    kv, itl = (
        ("gpu_cache_usage_perc", "time_per_output_token_seconds")
        if old_names
        else (
            "kv_cache_usage_perc",
            "inter_token_latency_seconds",
        )
    )
    return f"""# TYPE vllm:num_requests_waiting gauge
vllm:num_requests_waiting{{engine="0",model_name="m"}} 1.0
vllm:num_requests_waiting{{engine="1",model_name="m"}} 2.0
# TYPE vllm:{kv} gauge
vllm:{kv}{{engine="0",model_name="m"}} 0.5
vllm:{kv}{{engine="1",model_name="m"}} 0.25
# TYPE vllm:{itl} histogram
vllm:{itl}_bucket{{engine="0",le="+Inf",model_name="m"}} {itl_count}
vllm:{itl}_count{{engine="0",model_name="m"}} {itl_count}
vllm:{itl}_sum{{engine="0",model_name="m"}} {itl_sum}
"""


def test_tpot_is_the_mean_of_the_last_window_not_of_all_time():
    reader = MetricsReader("vllm")
    reader.read(exposition(itl_sum=100.0, itl_count=10_000), now=1.0)
    m = reader.read(exposition(itl_sum=120.0, itl_count=10_100), now=2.0)
    assert m.tpot_seconds == pytest.approx(0.2)  # all-time mean would be ~0.0119


def test_llamacpps_tpot_comes_from_its_counters_over_the_window_not_its_rate_gauge():
    # The fixture was scraped from llama-server 0.3.36 (-np 4) with six requests in flight.
    text = fixture("llamacpp.txt")
    reader = MetricsReader("llamacpp")
    assert reader.read(text, now=1.0).tpot_seconds is None  # no window yet
    later = text.replace("tokens_predicted_total 8", "tokens_predicted_total 108").replace(
        "tokens_predicted_seconds_total 0.151211", "tokens_predicted_seconds_total 3.151211"
    )
    assert reader.read(later, now=2.0).tpot_seconds == pytest.approx(0.03)
    # The tokens/s gauge is reset by every scrape, whoever scrapes: it is not read.
    assert (
        reader.read(
            later.replace("predicted_tokens_seconds 46.2929", "predicted_tokens_seconds 1"), now=3.0
        ).tpot_seconds
        is None
    )


def test_llamacpps_prefill_cost_per_token_is_its_prompt_counters_over_the_window():
    text = fixture("llamacpp.txt")
    reader = MetricsReader("llamacpp")
    assert reader.read(text, now=1.0).prefill_seconds_per_token is None  # no window yet
    later = text.replace("prompt_tokens_total 45", "prompt_tokens_total 145").replace(
        "prompt_seconds_total 0.818701", "prompt_seconds_total 1.318701"
    )
    assert reader.read(later, now=2.0).prefill_seconds_per_token == pytest.approx(0.005)


def test_a_window_without_tokens_gives_no_tpot_and_a_reset_counter_is_not_negative():
    reader = MetricsReader("vllm")
    reader.read(exposition(10.0, 100), now=1.0)
    assert reader.read(exposition(10.0, 100), now=2.0).tpot_seconds is None
    assert reader.read(exposition(0.5, 5), now=3.0).tpot_seconds is None
    assert window_mean((1.0, 10), (2.0, 20)) == pytest.approx(0.1)


def test_queues_are_summed_over_engines_kv_usage_is_the_highest_and_old_names_work():
    m = MetricsReader("vllm").read(exposition(1.0, 10, old_names=True), now=1.0)
    assert m.waiting == 3.0 and m.kv_cache_usage == 0.5


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown backend kind"):
        MetricsReader("triton")


@pytest.mark.parametrize("kind", ["vllm", "tgi", "sglang"])
async def test_it_reads_the_simulators_own_output_across_two_scrapes(kind):
    sim = start_simulator("--speed", "5", "--format", kind)
    try:
        async with httpx.AsyncClient() as client:
            seen: list[BackendMetrics] = []
            poller = MetricsPoller(
                "sim", kind, sim.url + "/metrics", client, lambda n, m: seen.append(m)
            )
            await poller.scrape_once()
            r = await client.post(
                sim.url + "/v1/completions",
                json={"model": "demo-llama", "prompt": "hi", "max_tokens": 20},
                timeout=30,
            )
            assert r.status_code == 200
            await poller.scrape_once()
        first, second = seen
        assert first.tpot_seconds is None
        assert 0 < second.tpot_seconds < 1
        assert second.waiting == 0 and second.running == 0 and second.kv_cache_usage == 0
        if kind != "tgi":
            assert second.ttft_seconds > 0
        if kind == "vllm":  # its per-request prefill histograms, as vLLM exports them
            assert 0 < second.prefill_seconds_per_token < 1
    finally:
        sim.stop()


async def test_a_backend_that_goes_down_is_marked_unhealthy_and_recovers_by_itself():
    up = {"value": True}

    def handler(request: httpx.Request) -> httpx.Response:
        assert request.headers["accept"] == "text/plain"
        if not up["value"]:
            raise httpx.ConnectError("refused", request=request)
        return httpx.Response(200, text=exposition(1.0, 10))

    seen: list[BackendMetrics] = []
    clock = iter(range(100))
    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        poller = MetricsPoller(
            "b",
            "vllm",
            "http://b/metrics",
            client,
            lambda n, m: seen.append(m),
            failures_before_unhealthy=2,
            clock=lambda: float(next(clock)),
        )
        assert (await poller.scrape_once()).healthy
        up["value"] = False
        assert await poller.scrape_once() is None  # one failure: no news, the old state ages
        down = await poller.scrape_once()
        assert down is not None and not down.healthy
        up["value"] = True
        assert (await poller.scrape_once()).healthy
    assert [m.healthy for m in seen] == [True, False, True]


@pytest.mark.parametrize(
    ("kind", "name"),
    [
        ("vllm", "vllm_v1.txt"),
        ("tgi", "tgi.txt"),
        ("sglang", "sglang.txt"),
        ("llamacpp", "llamacpp.txt"),
    ],
)
def test_parsing_only_the_families_read_keeps_every_value_they_hold(kind, name):
    text, families = fixture(name), profile(kind).metrics.families()
    whole, filtered = parse_samples(text), parse_samples(text, families=families)
    assert filtered  # the fixture holds some of them
    assert filtered == {k: v for k, v in whole.items() if k in filtered}
    read = {f + s for f in families for s in ("", "_sum", "_count", "_total")}
    assert {k for k in whole if k in read} == set(filtered)
