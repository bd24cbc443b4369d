"""`rungateway --workers N`: one socket, N processes, one scheduler; a dead worker comes back."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from llmserver.testing.processes import ROOT, Database, GatewayProcess, start_gateway
from simulator.launcher import RunningSimulator, free_port, start_simulator
from tests.cluster.cluster_helpers import REDIS_URL, delete_prefix, needs_redis
from tests.e2e.clients import join, start_streams

pytestmark = pytest.mark.e2e


def children(pid: int) -> set[int]:
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                found.add(int(entry.name))
    return found


def test_more_than_one_worker_needs_redis() -> None:
    env = {**os.environ, "SECRET_KEY": "test", "DATABASE_URL": "sqlite:///:memory:"}
    env.pop("REDIS_URL", None)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run(
        [sys.executable, "manage.py", "rungateway", "--workers", "2", "--port", str(free_port())],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "--workers 2 needs REDIS_URL" in done.stderr


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[GatewayProcess]:
    sim: RunningSimulator = start_simulator("--max-num-seqs", "4", "--model", "demo-llama")
    prefix = f"test-workers-{uuid.uuid4().hex[:10]}"
    env = {"SCRAPE_INTERVAL": "0.05", "REDIS_URL": REDIS_URL, "CLUSTER_PREFIX": prefix}
    database = Database(tmp_path)
    gateway = start_gateway(
        database.url, sim.url, env, quiet=True, rungateway=True, rungateway_args=["--workers", "2"]
    )
    try:
        yield gateway
    finally:
        gateway.stop()
        sim.stop()
        database.drop()
        delete_prefix(prefix)


def scheduler_states(gateway: GatewayProcess, tries: int = 60) -> set[str]:
    """What /readyz says over fresh connections (each may land on either worker)."""
    seen = set()
    for _ in range(tries):
        body = httpx.get(gateway.url + "/readyz", timeout=5).json()
        seen.add(str(body.get("scheduler")))
        if {"leader", "follower"} <= seen:
            break
        time.sleep(0.05)
    return seen


@needs_redis
def test_two_workers_share_the_socket_and_one_scheduler(workers: GatewayProcess) -> None:
    assert len(children(workers.process.pid)) == 2
    assert scheduler_states(workers) == {"leader", "follower"}
    outcomes = join(start_streams(workers, [10] * 6))
    assert [out.get("status") for out in outcomes] == [200] * 6


@needs_redis
def test_a_worker_that_dies_is_started_again(workers: GatewayProcess) -> None:
    before = children(workers.process.pid)
    victim = min(before)
    os.kill(victim, signal.SIGKILL)
    deadline = time.monotonic() + 30
    while len(children(workers.process.pid) - {victim}) < 2:
        assert time.monotonic() < deadline, "the dead worker was not replaced"
        time.sleep(0.1)
    outcomes = join(start_streams(workers, [10] * 4))
    assert [out.get("status") for out in outcomes] == [200] * 4
