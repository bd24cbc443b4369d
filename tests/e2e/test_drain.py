"""SIGTERM through `rungateway` with live streams: a drain, not a hang.

The streams in flight finish if they can within DRAIN_SECONDS; those that cannot end with an
error event and `[DONE]`; every request leaves one usage row with the tokens delivered, and the
process exits 0. A second signal ends it at once (status 1).
"""

from __future__ import annotations

import json
import signal
import time

import httpx
import pytest

from llmserver.testing.processes import Database, start_gateway
from simulator.launcher import start_simulator
from tests.e2e.clients import join, start_streams, usage_rows

pytestmark = pytest.mark.e2e


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


def test_sigterm_drains_live_streams_and_bills_what_was_delivered(slow_world):
    gateway = slow_world
    httpx.get(gateway.url + "/readyz", timeout=10)  # the gateway starts: not the streams' time
    streams = start_streams(gateway, [4, 400, 400])
    time.sleep(1.0)  # every stream has started; the short one is about to finish
    gateway.process.send_signal(signal.SIGTERM)
    assert gateway.process.wait(timeout=20) == 0
    outcomes = join(streams)
    short, *long = outcomes
    assert short["status"] == 200 and short["tail"][-1] == "data: [DONE]"
    for out in long:
        assert out["status"] == 200 and out["tail"][-1] == "data: [DONE]"
        assert json.loads(out["tail"][0][6:])["error"]["code"] == "shutting_down"
    rows = usage_rows(gateway)
    assert len(rows) == 3
    assert rows[short["id"]][:2] == ("ok", 4)
    for out in long:
        status, tokens, error_type = rows[out["id"]]
        assert (status, error_type) == ("error", "shutting_down")
        assert abs(tokens - out["text_events"]) <= 1 and tokens > 0


def test_a_second_signal_ends_the_drain_at_once(slow_world):
    gateway = slow_world
    streams = start_streams(gateway, [400])
    time.sleep(1.0)
    gateway.process.send_signal(signal.SIGTERM)
    time.sleep(0.2)
    started = time.monotonic()
    gateway.process.send_signal(signal.SIGTERM)
    assert gateway.process.wait(timeout=10) == 1
    assert time.monotonic() - started < 1.4  # sooner than the drain time left
    join(streams)
