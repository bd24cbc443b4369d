"""SIGTERM through `rungateway` with live streams: a drain, not a hang.

The streams in flight finish if they can within DRAIN_SECONDS; those that cannot end with an
error event and `[DONE]`; every request leaves one usage row with the tokens delivered, and the
process exits 0. A second signal ends it at once (status 1).
"""

from __future__ import annotations

import json
import signal
import threading
import time
from typing import Any

import httpx
import pytest

from llmserver.testing.processes import Database, Gateway, start_gateway
from simulator.launcher import start_simulator

pytestmark = pytest.mark.e2e


def _stream(gateway: Gateway, max_tokens: int, out: dict[str, Any]) -> None:
    """One streamed chat; records the status, the events with text, and the last two events."""
    body = {
        "model": "demo-llama",
        "stream": True,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "tell me a long story"}],
    }
    headers = {"authorization": f"Bearer {gateway.key('alice')}"}
    events: list[str] = []
    try:
        with httpx.stream(
            "POST", gateway.url + "/v1/chat/completions", json=body, headers=headers, timeout=60
        ) as response:
            out["status"] = response.status_code
            out["id"] = response.headers.get("x-request-id")
            events.extend(line for line in response.iter_lines() if line.startswith("data: "))
    except httpx.HTTPError as exc:
        out["error"] = repr(exc)
    out["text_events"] = sum('"content":"' in e and '"content":""' not in e for e in events)
    out["tail"] = events[-2:]


def _usage(gateway: Gateway) -> dict[str, tuple[str, int, str]]:
    script = (
        "import json; from tenants.models import UsageRecord; print(json.dumps(list("
        "UsageRecord.objects.values_list('request_id', 'status', 'completion_tokens', "
        "'error_type'))))"
    )
    rows = json.loads(gateway.manage("shell", "-c", script).strip().splitlines()[-1])
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


@pytest.fixture
def slow_world(tmp_path):
    # A slow simulator: ~20 tokens/s per stream, so a 400-token stream outlasts the drain.
    sim = start_simulator("--max-num-seqs", "8", "--model", "demo-llama", "--speed", "0.5")
    database = Database(tmp_path)
    gateway = start_gateway(
        database.url,
        sim.url,
        {"DRAIN_SECONDS": "1.5", "SCRAPE_INTERVAL": "0.05", "USAGE_FLUSH_INTERVAL": "3600"},
        rungateway=True,
        quiet=True,
    )
    yield gateway
    gateway.stop()
    sim.stop()
    database.drop()


def _start_streams(gateway: Gateway, lengths: list[int]) -> list[tuple[threading.Thread, dict]]:
    streams = []
    for n in lengths:
        out: dict[str, Any] = {}
        thread = threading.Thread(target=_stream, args=(gateway, n, out))
        thread.start()
        streams.append((thread, out))
    return streams


def test_sigterm_drains_live_streams_and_bills_what_was_delivered(slow_world):
    gateway = slow_world
    streams = _start_streams(gateway, [4, 400, 400])
    time.sleep(1.0)  # every stream has started; the short one is about to finish
    gateway.process.send_signal(signal.SIGTERM)
    assert gateway.process.wait(timeout=20) == 0
    for thread, _ in streams:
        thread.join(timeout=10)
    outcomes = [out for _, out in streams]
    short, *long = outcomes
    assert short["status"] == 200 and short["tail"][-1] == "data: [DONE]"
    for out in long:
        assert out["status"] == 200 and out["tail"][-1] == "data: [DONE]"
        assert json.loads(out["tail"][0][6:])["error"]["code"] == "shutting_down"
    rows = _usage(gateway)
    assert len(rows) == 3
    assert rows[short["id"]][:2] == ("ok", 4)
    for out in long:
        status, tokens, error_type = rows[out["id"]]
        assert (status, error_type) == ("error", "shutting_down")
        assert abs(tokens - out["text_events"]) <= 1 and tokens > 0


def test_a_second_signal_ends_the_drain_at_once(slow_world):
    gateway = slow_world
    streams = _start_streams(gateway, [400])
    time.sleep(1.0)
    gateway.process.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    started = time.monotonic()
    gateway.process.send_signal(signal.SIGTERM)
    assert gateway.process.wait(timeout=10) == 1
    assert time.monotonic() - started < 1.4  # sooner than the drain time left
    for thread, _ in streams:
        thread.join(timeout=10)
