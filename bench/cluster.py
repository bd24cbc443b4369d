"""Cluster benchmark: what sharing one scheduler through Redis costs, and what workers buy.

  grant    one job at a time, submit -> grant -> complete, in one process: the in-process
           scheduler (SchedulerService) next to the Redis transport (ClusterScheduler, this
           process leading), so the difference is the added grant round trip
  workers  64 concurrent closed-loop clients, non-streaming, against `rungateway` with the
           in-process scheduler, with the Redis transport in one process, and with --workers
           2 and 4, in front of a near-instant simulator: requests/s and the ratios to one process

Needs Redis (REDIS_URL, default redis://127.0.0.1:6379/4); keys go under a fresh prefix and are
deleted afterwards. The load generator shares the machine's cores with the gateway workers and
the simulator: read the figures as ratios from one run.

No way runs at the product's defaults. `grant` gives both schedulers one backend without metrics
(so no gate), max_in_flight 1,000,000 (product 64) and preemption off: it times the grant round
trip alone, and no job is ever sent to a backend; the jobs are on the standard band with the
default per-user limits, the lease is the product's 3 s. `workers` uses overhead.py's gateway
setup, for the same reason (the gateway's own cost is measured): max_in_flight 100,000 on the
demo's backend (product 64), so no gate holds a request back; the interactive tier's per-user
limits 100,000 and queue timeout 600 s (demo 4, 64 and 60 s), as one key sends all the load;
ACCESS_LOG false (product true), as its line per request would go to the terminal. Every
`workers` target sets REDIS_URL (product blank), the in-process one included, so that the
targets differ only in the transport (with it, rate-limit windows, budget holds and the
dashboard's channel layer are in Redis in all of them), and a fresh CLUSTER_PREFIX (product
"llmserver"), so that no target meets another's keys. Then `1 in-process` keeps
SCHEDULER_TRANSPORT local (the product's), `1 redis` sets it to redis, and `2 redis` / `4 redis`
run rungateway's `--workers` 2 and 4 (product 1), which share one scheduler through Redis: these
are what is measured. USAGE_FLUSH_INTERVAL stays start_gateway's 0.1 s, the tests' value
(product 1.0; overhead.py sets 1.0), alike in every target.

    .venv/bin/python bench/cluster.py
    .venv/bin/python bench/cluster.py --phases grant --jobs 5000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

from loadgen import configure_gateway, fmt, percentile
from overhead import drive, gateway_setup, phase_request

from llmserver.cluster.node import ClusterScheduler
from llmserver.cluster.transport import SchedulerTransport
from llmserver.testing.processes import Database, start_gateway
from scheduling import BackendConfig, Job, Principal, SchedulerConfig, SchedulerService
from simulator.launcher import start_simulator

REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/4")
BACKEND = BackendConfig("b1", frozenset({"m"}), max_in_flight=1_000_000, has_metrics=False)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--phases", default="grant,workers")
    p.add_argument("--jobs", type=int, default=2000, help="Jobs per transport in `grant`.")
    p.add_argument("--duration", type=float, default=6.0, help="Seconds per `workers` target.")
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=4)
    p.add_argument("--workers", default="1,2,4")
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


async def round_trips(transport: SchedulerTransport, jobs: int) -> list[float]:
    out = []
    principal = Principal("bench", "u")
    for i in range(jobs):
        job = Job(id=f"j{i}-{uuid.uuid4().hex[:6]}", principal=principal, model="m", band=1)
        start = time.perf_counter()
        ticket = transport.submit(job)
        await ticket.dispatched()
        out.append(time.perf_counter() - start)
        transport.complete(ticket, 1.0)
    return out


async def grant_phase(args: argparse.Namespace) -> dict[str, Any]:
    local = SchedulerService(SchedulerConfig(gates={}), (BACKEND,))
    await local.start()
    prefix = f"bench-cluster-{uuid.uuid4().hex[:8]}"
    cluster = ClusterScheduler(REDIS_URL, prefix, 3.0, SchedulerConfig(gates={}), (BACKEND,))
    await cluster.start()
    try:
        async with asyncio.timeout(30):
            while not (cluster.leading and cluster.relay.epoch == cluster.lease.epoch):
                await asyncio.sleep(0.01)
        await asyncio.sleep(0.5)  # past the new leader's settle time
        results = {}
        for name, transport in (("in_process", local), ("redis", cluster)):
            await round_trips(transport, min(200, args.jobs))  # warm-up
            times = await round_trips(transport, args.jobs)
            results[name] = {
                "p50_ms": (percentile(times, 50) or 0) * 1000,
                "p99_ms": (percentile(times, 99) or 0) * 1000,
            }
        results["added_p50_ms"] = results["redis"]["p50_ms"] - results["in_process"]["p50_ms"]
        return results
    finally:
        await local.stop()
        await cluster.stop()
        delete_prefix(prefix)


def delete_prefix(prefix: str) -> None:
    import redis

    client = redis.Redis.from_url(REDIS_URL)
    keys = list(client.scan_iter(match=f"{prefix}:*"))
    if keys:
        client.delete(*keys)
    client.close()


async def workers_phase(args: argparse.Namespace) -> dict[str, Any]:
    sim = start_simulator(
        *("--max-num-seqs", "1024", "--base-step-ms", "0.05", "--per-seq-ms", "0"),
        *("--prefill-ms-per-token", "0", "--model", "demo-llama"),
        quiet=True,
    )
    counts = [int(n) for n in args.workers.split(",")]
    targets: list[tuple[str, dict[str, str], list[str]]] = [("1 in-process", {}, [])]
    for n in counts:
        env = {"SCHEDULER_TRANSPORT": "redis"} if n == 1 else {}
        targets.append((f"{n} redis", env, ["--workers", str(n)] if n > 1 else []))
    results: dict[str, Any] = {}
    try:
        for name, extra, rg_args in targets:
            prefix = f"bench-workers-{uuid.uuid4().hex[:8]}"
            env = {"REDIS_URL": REDIS_URL, "CLUSTER_PREFIX": prefix, "ACCESS_LOG": "false", **extra}
            with tempfile.TemporaryDirectory(prefix="bench-cluster-") as tmp:
                db = Database(Path(tmp))
                gw = start_gateway(
                    db.url, sim.url, env, quiet=True, rungateway=True, rungateway_args=rg_args
                )
                try:
                    tiers, keys = gateway_setup()
                    secret = configure_gateway(
                        gw, tiers, keys, {"simulator": {"max_in_flight": 100_000}}
                    )
                    request = phase_request("c64", gw.url, secret["bench"], args)
                    print(f"workers: {name} ...", file=sys.stderr, flush=True)
                    await drive(gw.url, request, args.concurrency, args.warmup)
                    results[name] = await drive(gw.url, request, args.concurrency, args.duration)
                finally:
                    gw.stop()
                    db.drop()
    finally:
        sim.stop()
    base = results["1 in-process"]["requests_per_second"]
    for value in results.values():
        value["ratio"] = value["requests_per_second"] / base
    return results


def report(results: dict[str, Any]) -> None:
    if "grant" in results:
        g = results["grant"]
        print("grant round trip (submit -> grant), one job at a time")
        for name in ("in_process", "redis"):
            print(
                f"  {name:<11} p50 {fmt(g[name]['p50_ms'], 1, 3)} ms  p99 {fmt(g[name]['p99_ms'], 1, 3)} ms"
            )
        print(f"  added by Redis at the median: {fmt(g['added_p50_ms'], 1, 3)} ms")
    if "workers" in results:
        print("requests/s, 64 clients, non-streaming")
        for name, r in results["workers"].items():
            print(
                f"  {name:<13} {fmt(r['requests_per_second'], 1, 0):>6} req/s  ratio "
                f"{fmt(r['ratio'])}  p50 {fmt(r['p50_ms'], 1, 1)} ms  errors {r['errors']}"
            )


async def main(args: argparse.Namespace) -> dict[str, Any]:
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    results: dict[str, Any] = {}
    if "grant" in phases:
        results["grant"] = await grant_phase(args)
    if "workers" in phases:
        results["workers"] = await workers_phase(args)
    return results


if __name__ == "__main__":
    arguments = parse_args()
    outcome = asyncio.run(main(arguments))
    print(json.dumps(outcome, indent=2) if arguments.json else "", end="")
    if not arguments.json:
        report(outcome)
