"""Faults under load, and the bill afterwards.

Clients that hang up at random, a backend killed and restarted mid-stream, database connections
terminated (PostgreSQL): after each, one usage row per request the gateway accepted, completion
tokens equal to what the client received (within `SLACK` events: the gateway may have written a
few more before it saw the hang-up), nothing in flight and nothing pending. Bounded: a few streams, short
timeouts. SIGTERM under load is `test_drain.py`.
"""

from __future__ import annotations

import random
import time
from collections.abc import Iterator

import httpx
import psycopg
import pytest
from prometheus_client.parser import text_string_to_metric_families

from llmserver.testing.processes import Database, GatewayProcess, start_gateway
from simulator.launcher import free_port, start_simulator
from tests.e2e.clients import join, start_streams, usage_rows

pytestmark = pytest.mark.e2e
SLACK = 3  # events in flight between the gateway's write and the client's hang-up
SIM_ARGS = ("--max-num-seqs", "8", "--model", "demo-llama", "--speed", "0.5")


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict]:
    port = free_port()
    sims = [start_simulator(*SIM_ARGS, port=port)]
    database = Database(tmp_path_factory.mktemp("chaos"))
    gateway = start_gateway(
        database.url,
        sims[0].url,
        {"SCRAPE_INTERVAL": "0.05", "USAGE_FLUSH_INTERVAL": "0.1"},
        rungateway=True,
        quiet=True,
    )
    yield {"gateway": gateway, "sims": sims, "port": port, "database": database}
    gateway.stop()
    for sim in sims:
        sim.stop()
    database.drop()


def gateway_gauges(gateway: GatewayProcess) -> dict[str, float]:
    text = httpx.get(gateway.url + "/metrics", timeout=5).text
    values: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            values[sample.name] = values.get(sample.name, 0.0) + sample.value
    return values


def settled(gateway: GatewayProcess, timeout: float = 10.0) -> dict[str, float]:
    """Wait until nothing is in flight or pending; the gauges then."""
    deadline = time.monotonic() + timeout
    while True:
        values = gateway_gauges(gateway)
        quiet = not values.get("llmserver_backend_in_flight") and not values.get(
            "llmserver_usage_pending"
        )
        if quiet or time.monotonic() > deadline:
            return values
        time.sleep(0.1)


def assert_billed_as_delivered(gateway: GatewayProcess, outcomes: list[dict]) -> dict:
    values = settled(gateway)
    assert values.get("llmserver_backend_in_flight", 0) == 0
    assert values.get("llmserver_usage_pending", 0) == 0
    rows = usage_rows(gateway)
    for out in outcomes:
        assert out.get("id") in rows, out
        _, tokens, _ = rows[out["id"]]
        # Never billed less than the client read; a client that hangs up mid-read leaves a few
        # events the gateway already wrote in its socket buffer, unread but delivered.
        assert out["text_events"] <= tokens <= out["text_events"] + SLACK, (out, rows[out["id"]])
    return rows


def test_clients_that_hang_up_at_random_are_billed_what_they_received(world):
    gateway = world["gateway"]
    rng = random.Random(11)
    stops = [rng.randint(1, 30) for _ in range(8)]
    outcomes = join(start_streams(gateway, [200] * 8, stop_after=stops))
    assert all(out["status"] == 200 for out in outcomes)
    rows = assert_billed_as_delivered(gateway, outcomes)
    assert {rows[out["id"]][0] for out in outcomes} == {"cancelled"}


def test_a_backend_killed_mid_stream_ends_streams_with_an_error_and_bills_them(world):
    gateway, port = world["gateway"], world["port"]
    streams = start_streams(gateway, [300] * 4)
    time.sleep(1.5)  # every stream is well under way
    world["sims"][-1].process.kill()
    outcomes = join(streams)
    for out in outcomes:
        assert out["status"] == 200 and out["tail"][-1] == "data: [DONE]"
        assert '"error"' in out["tail"][0]
    rows = assert_billed_as_delivered(gateway, outcomes)
    assert {rows[out["id"]][0] for out in outcomes} == {"error"}
    # The backend comes back on its port; the gateway serves again once it scrapes it.
    world["sims"].append(start_simulator(*SIM_ARGS, port=port))
    deadline = time.monotonic() + 15
    while True:
        (again,) = join(start_streams(gateway, [3]))
        if again.get("status") == 200 or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert again["status"] == 200 and again["tail"][-1] == "data: [DONE]"


def test_terminated_database_connections_lose_no_usage_row(world):
    database = world["database"]
    if not database.url.startswith(("postgres://", "postgresql://")):
        pytest.skip("terminating database connections needs PostgreSQL (DATABASE_URL)")
    gateway = world["gateway"]
    streams = start_streams(gateway, [60] * 4)
    time.sleep(0.5)
    with psycopg.connect(database.url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
    outcomes = join(streams)
    outcomes += join(start_streams(gateway, [5] * 2))
    assert all(out["status"] == 200 for out in outcomes)
    rows = assert_billed_as_delivered(gateway, outcomes)
    assert {rows[out["id"]][0] for out in outcomes} == {"ok"}


def test_a_backend_restarted_under_a_full_queue_serves_every_queued_request(world):
    """Killed with requests running and more queued behind them, and back a second later: the
    running ones end with an error (their answers are cut), the queued ones, dispatched as the
    dead streams free their slots, wait for the backend (their queue timeout is a minute)
    instead of each failing against it in turn."""
    gateway, port = world["gateway"], world["port"]
    running = start_streams(gateway, [300] * 4)  # the demo key's four at a time
    time.sleep(1.0)
    queued = start_streams(gateway, [5] * 8)
    time.sleep(0.3)
    world["sims"][-1].process.kill()
    time.sleep(1.0)
    world["sims"].append(start_simulator(*SIM_ARGS, port=port))
    cut, served = join(running), join(queued)
    assert [out["status"] for out in served] == [200] * 8
    assert all(out["tail"][-1] == "data: [DONE]" for out in served)
    rows = assert_billed_as_delivered(gateway, cut + served)
    assert {rows[out["id"]][0] for out in served} == {"ok"}
    assert {rows[out["id"]][0] for out in cut} == {"error"}


def test_an_admin_edit_of_the_backend_under_load_cuts_no_stream(world):
    """The edit reaches the gateway through the database's change counter, which it reads every
    0.5 s (another process changed the database, so no signal told it); the streams under way
    keep their connection to the end."""
    gateway = world["gateway"]
    streams = start_streams(gateway, [300] * 4)
    time.sleep(1.0)
    gateway.manage(
        "shell",
        "-c",
        "from tenants.models import Backend; Backend.objects.update(max_in_flight=40)",
    )
    outcomes = join(streams)
    assert all(out["status"] == 200 and out["tail"][-1] == "data: [DONE]" for out in outcomes)
    assert not any('"error"' in line for out in outcomes for line in out["tail"])
    rows = assert_billed_as_delivered(gateway, outcomes)
    assert {rows[out["id"]][0] for out in outcomes} == {"ok"}
