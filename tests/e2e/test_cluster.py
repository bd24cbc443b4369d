"""Three gateway processes, one scheduler: one fair queue across them, and a leader's death
survived. Real processes on loopback, one simulator, a real Redis (skipped without one)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmserver.testing.processes import Database, GatewayProcess, start_gateway, start_peer
from simulator.launcher import RunningSimulator, start_simulator
from simulator.protocol import chat_prompt, token_text, tokenize
from tests.cluster.cluster_helpers import REDIS_URL, delete_prefix, needs_redis
from tests.cluster.cluster_proxy import CuttableProxy
from tests.e2e.clients import join, start_streams, usage_rows

pytestmark = [pytest.mark.e2e, needs_redis]
NO_TPOT_GATE = (
    "shell",
    "-c",
    "from tenants.models import Tier; Tier.objects.update(gate_max_tpot_ms=None)",
)


@pytest.fixture
def simulator() -> Iterator[RunningSimulator]:
    sim = start_simulator("--max-num-seqs", "2", "--model", "demo-llama", "--speed", "2")
    yield sim
    sim.stop()


@contextlib.contextmanager
def members(
    simulator: RunningSimulator,
    tmp_path: Path,
    redis_url: str,
    count: int,
    setup: tuple[tuple[str, ...], ...] = (),
) -> Iterator[list[GatewayProcess]]:
    """`count` gateway processes on one database and one Redis prefix of their own; `setup`
    are manage.py commands run before the first serves."""
    prefix = f"test-e2e-{uuid.uuid4().hex[:10]}"
    env = {
        "SCRAPE_INTERVAL": "0.05",
        "REDIS_URL": redis_url,
        "SCHEDULER_TRANSPORT": "redis",
        "CLUSTER_PREFIX": prefix,
        "CLUSTER_LEASE_SECONDS": "1.5",
    }
    database = Database(tmp_path)
    first = start_gateway(
        database.url, simulator.url, env, quiet=True, setup=[NO_TPOT_GATE, *setup]
    )
    started = [first]
    try:
        started += [start_peer(first) for _ in range(count - 1)]
        for member in started:
            # Each process starts its gateway (and joins the cluster) at its first request: at
            # once, so that a test's requests are not the ones that wait for it.
            readiness(member)
        yield started
    finally:
        for member in started:
            member.stop()
        database.drop()
        delete_prefix(prefix)


@pytest.fixture
def cluster(simulator: RunningSimulator, tmp_path: Path) -> Iterator[list[GatewayProcess]]:
    with members(simulator, tmp_path, REDIS_URL, 3) as started:
        yield started


class ThreadedProxy:
    """`CuttableProxy` on an event loop of its own thread, driven from this synchronous test."""

    def __init__(self) -> None:
        target = urlsplit(REDIS_URL)
        self.proxy = CuttableProxy(target.hostname or "127.0.0.1", target.port or 6379)
        self.url = f"redis://127.0.0.1:{self.proxy.port}{target.path}"
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()

    def start(self) -> None:
        asyncio.run_coroutine_threadsafe(self.proxy.start(), self.loop).result(10)

    def cut(self) -> None:
        asyncio.run_coroutine_threadsafe(self.proxy.cut(), self.loop).result(10)

    def close(self) -> None:
        self.cut()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


@pytest.fixture
def proxy() -> Iterator[ThreadedProxy]:
    running = ThreadedProxy()
    running.start()
    yield running
    running.close()


def readiness(gateway: GatewayProcess) -> dict[str, object]:
    try:
        return dict(httpx.get(gateway.url + "/readyz", timeout=5).json())
    except httpx.HTTPError:
        return {}


def wait_for_leader(members: list[GatewayProcess], timeout: float = 30.0) -> GatewayProcess:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for member in members:
            if readiness(member).get("scheduler") == "leader":
                return member
        time.sleep(0.1)
    raise AssertionError(f"no leader: {[readiness(m) for m in members]}")


def metric(gateway: GatewayProcess, name: str) -> float:
    """A gateway's /metrics sample `name`, summed over its label sets."""
    text = httpx.get(gateway.url + "/metrics", timeout=5).text
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    )


def queued(gateway: GatewayProcess) -> float:
    return metric(gateway, "llmserver_queue_depth")


def wait_queued(gateways: list[GatewayProcess], at_least: int, timeout: float = 30.0) -> None:
    """Until the cluster's queue (all on the leader, whichever process that is) holds this many."""
    deadline = time.monotonic() + timeout
    while sum(queued(g) for g in gateways) < at_least:
        assert time.monotonic() < deadline, f"never {at_least} queued in the cluster"
        time.sleep(0.05)


def wait_some_streaming(streams: list, timeout: float = 30.0) -> None:
    """Until at least one stream receives text (which one goes first is the scheduler's call)."""
    deadline = time.monotonic() + timeout
    while not any(out.get("text_events", 0) for _, out in streams):
        assert time.monotonic() < deadline, f"nothing streams: {[out for _, out in streams]}"
        time.sleep(0.05)


def new_key(gateway: GatewayProcess, user: str, tier: str) -> str:
    out = gateway.manage("create_api_key", "demo", user, "--tier", tier, "--json")
    return str(json.loads(out.strip().splitlines()[-1])["key"])


def test_light_users_on_other_processes_go_before_the_power_users_flood(
    cluster: list[GatewayProcess],
) -> None:
    one, two, three = cluster
    wait_for_leader(cluster)
    power, light1, light2 = (new_key(one, user, "batch") for user in ("power", "l1", "l2"))
    flood = start_streams(one, [60] * 12, key=power)
    wait_queued(cluster, 8)
    lights = start_streams(two, [20], key=light1) + start_streams(three, [20], key=light2)
    outcomes = join(flood + lights)
    assert all(out.get("status") == 200 for out in outcomes), outcomes
    power_starts = sorted(out["first_text_at"] for out in outcomes[:12])
    for light in outcomes[12:]:
        assert light["first_text_at"] < power_starts[9]


def test_the_leaders_death_loses_no_request_on_the_other_processes(
    cluster: list[GatewayProcess],
) -> None:
    leader = wait_for_leader(cluster)
    survivors = [m for m in cluster if m is not leader]
    streams = start_streams(survivors[0], [100] * 6) + start_streams(
        survivors[1], [100] * 6, key=survivors[1].key("bob")
    )
    wait_some_streaming(streams)
    wait_queued([leader], 1)
    leader.process.kill()  # kill -9: no drain, no lease hand-over
    leader.process.wait(timeout=10)
    outcomes = join(streams)
    for out in outcomes:
        assert out.get("status") == 200, out
        assert out["tail"][-1] == "data: [DONE]", out
    assert wait_for_leader(survivors) in survivors
    rows = written_rows(survivors[0], {out["id"] for out in outcomes})
    assert all(rows[out["id"]][0] == "ok" for out in outcomes), rows


def written_rows(gateway: GatewayProcess, ids: set[str], timeout: float = 20.0) -> dict:
    """The usage rows once all of `ids` are written (the writer flushes a moment after the
    client's last byte); fails naming the missing ones."""
    deadline = time.monotonic() + timeout
    while True:
        rows = usage_rows(gateway)
        missing = ids - set(rows)
        if not missing:
            return rows
        assert time.monotonic() < deadline, f"no usage row for {sorted(missing)}"
        time.sleep(0.2)


def wait_state(gateways: list[GatewayProcess], state: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while any(readiness(g).get("scheduler") != state for g in gateways):
        assert time.monotonic() < deadline, f"not all {state}: {[readiness(g) for g in gateways]}"
        time.sleep(0.1)


def test_a_redis_outage_refuses_new_requests_and_loses_none_it_held(
    simulator: RunningSimulator, tmp_path: Path, proxy: ThreadedProxy
) -> None:
    with members(simulator, tmp_path, proxy.url, 2) as gateways:
        leader = wait_for_leader(gateways)
        streams = [s for g in gateways for s in start_streams(g, [100] * 5)]
        wait_some_streaming(streams)
        wait_queued([leader], 1)
        proxy.cut()
        wait_state(gateways, "redis_unavailable")
        body = {"model": "demo-llama", "messages": [{"role": "user", "content": "hi"}]}
        headers = {"authorization": f"Bearer {gateways[0].key('alice')}"}
        refused = httpx.post(
            gateways[0].url + "/v1/chat/completions", json=body, headers=headers, timeout=10
        )
        proxy.start()
        outcomes = join(streams)
        assert refused.status_code == 503 and refused.headers["retry-after"] == "5"
        assert refused.json()["error"]["code"] == "scheduler_unavailable"
        for out in outcomes:
            assert out.get("status") == 200, out
            assert out["tail"][-1] == "data: [DONE]", out
        assert wait_for_leader(gateways) in gateways
        rows = written_rows(gateways[0], {out["id"] for out in outcomes})
        assert all(rows[out["id"]][0] == "ok" for out in outcomes), rows


def test_a_quota_holds_when_a_burst_is_spread_over_the_processes(
    cluster: list[GatewayProcess],
) -> None:
    wait_for_leader(cluster)
    key = new_key(cluster[0], "bursty", "batch")
    cluster[0].manage(
        "shell",
        "-c",
        "from tenants.models import QuotaRule, Tenant; QuotaRule.objects.create("
        "tenant=Tenant.objects.get(slug='demo'), window='day', metric='requests', limit=2)",
    )
    body = {"model": "demo-llama", "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"authorization": f"Bearer {key}"}
    barrier = threading.Barrier(9)

    def send(gateway: GatewayProcess) -> httpx.Response:
        barrier.wait()
        url = gateway.url + "/v1/chat/completions"
        return httpx.post(url, json=body, headers=headers, timeout=30)

    with ThreadPoolExecutor(9) as pool:
        responses = list(pool.map(send, [g for g in cluster for _ in range(3)]))
    statuses = sorted(r.status_code for r in responses)
    assert statuses == [200, 200] + [429] * 7, [r.text for r in responses]
    assert {r.json()["error"]["code"] for r in responses if r.status_code == 429} == {
        "quota_exceeded"
    }


MAKE_ROOM = (
    "shell",
    "-c",
    "from tenants.models import Backend, Tier; "
    "Tier.objects.update(gate_max_waiting=1, preempt_after_ms=50, max_concurrent_per_user=16); "
    "Backend.objects.update(capacity=3, max_in_flight=3)",
)
POWER_TOKENS = 60
POWER_MESSAGES = [{"role": "user", "content": "tell me a long story"}]


def whole_stream(gateway: GatewayProcess, key: str, out: dict[str, Any]) -> None:
    """A streamed chat with usage, recording every event's text, id and the final usage."""
    body = {
        "model": "demo-llama",
        "stream": True,
        "max_tokens": POWER_TOKENS,
        "stream_options": {"include_usage": True},
        "messages": POWER_MESSAGES,
    }
    headers = {"authorization": f"Bearer {key}"}
    out.update(text="", ids=set(), text_events=0)
    with httpx.stream(
        "POST", gateway.url + "/v1/chat/completions", json=body, headers=headers, timeout=60
    ) as response:
        out["status"], out["id"] = response.status_code, response.headers.get("x-request-id")
        for line in response.iter_lines():
            if not line.startswith("data: {"):
                continue
            chunk = json.loads(line[6:])
            out["ids"].add(chunk["id"])
            if chunk.get("usage"):
                out["usage"] = chunk["usage"]
            for choice in chunk.get("choices", []):
                text = choice["delta"].get("content") or ""
                out["text"] += text
                out["text_events"] += bool(text)


def test_a_stream_paused_for_a_user_on_another_process_continues_as_one_answer(
    tmp_path: Path,
) -> None:
    sim = start_simulator("--max-num-seqs", "3", "--model", "demo-llama", "--speed", "4")
    try:
        with members(sim, tmp_path, REDIS_URL, 2, setup=(MAKE_ROOM,)) as (one, two):
            wait_for_leader([one, two])
            power, light = (
                new_key(one, "power", "interactive"),
                new_key(one, "light", "interactive"),
            )
            streams = []
            for _ in range(3):
                out: dict[str, Any] = {}
                thread = threading.Thread(target=whole_stream, args=(one, power, out))
                thread.start()
                streams.append((thread, out))
            deadline = time.monotonic() + 30
            while not all(out.get("text_events") for _, out in streams):
                assert time.monotonic() < deadline, [out for _, out in streams]
                time.sleep(0.02)
            answer = httpx.post(
                two.url + "/v1/chat/completions",
                json={"model": "demo-llama", "max_tokens": 4, "messages": POWER_MESSAGES},
                headers={"authorization": f"Bearer {light}"},
                timeout=30,
            )
            outcomes = join(streams)
            assert answer.status_code == 200, answer.text
            assert sum(metric(g, "llmserver_preemptions_total") for g in (one, two)) >= 1
            whole = "".join(token_text(i) for i in range(1, POWER_TOKENS + 1))
            prompt = len(tokenize(chat_prompt(POWER_MESSAGES)))
            for out in outcomes:
                assert out["status"] == 200 and out["text"] == whole and len(out["ids"]) == 1
                assert (out["usage"]["prompt_tokens"], out["usage"]["completion_tokens"]) == (
                    prompt,
                    POWER_TOKENS,
                )
            rows = written_rows(one, {out["id"] for out in outcomes})
            assert {rows[out["id"]][:2] for out in outcomes} == {("ok", POWER_TOKENS)}
    finally:
        sim.stop()
