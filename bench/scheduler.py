"""Benchmark the scheduler core: decisions per second and memory against active principals.

A decision is one dispatch chosen by `Scheduler.select`. The steady-state run keeps the queue at
`--queued` jobs spread over N principals: every dispatched job is completed at once and replaced
by a new job of the same principal, so every principal stays backlogged. The per-decision cost
should stay roughly flat as N grows (heaps: O(log N)), not grow linearly.

    .venv/bin/python bench/scheduler.py
    .venv/bin/python bench/scheduler.py --principals 1000,10000,100000 --json
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import sys
import time
import tracemalloc
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scheduling import (
    BackendConfig,
    BackendMetrics,
    Job,
    Principal,
    Scheduler,
    SchedulerConfig,
    TierPolicy,
)


def build(
    n_principals: int, queued: int, backends: int, bands: int
) -> tuple[Scheduler, list[Principal]]:
    configs = [
        BackendConfig(f"b{i}", frozenset({"m"}), max_in_flight=1_000) for i in range(backends)
    ]
    s = Scheduler(SchedulerConfig(), configs)
    for c in configs:
        s.update_metrics(
            c.name, BackendMetrics(waiting=0, tpot_seconds=0.05, healthy=True, scraped_at=0.0)
        )
    principals = [Principal(f"t{i % 100}", f"u{i}") for i in range(n_principals)]
    return s, principals


def fill(s: Scheduler, principals: list[Principal], queued: int, bands: int, ids: Any) -> None:
    n = len(principals)
    per = max(1, queued // n)
    for k in range(per):
        for i, p in enumerate(principals):
            s.submit(make_job(p, (i + k) % bands, next(ids), n), 0.0)


def make_job(p: Principal, band: int, seq: int, n: int) -> Job:
    return Job(f"j{seq}", p, "m", band, estimated_cost=1.0 + seq % 7,
               policy=TierPolicy(max_queued=1_000_000, max_concurrent=1_000_000))  # fmt: skip


def steady(n: int, queued: int, decisions: int, backends: int, bands: int) -> dict[str, float]:
    ids = itertools.count()
    s, principals = build(n, queued, backends, bands)
    fill(s, principals, queued, bands, ids)
    gc.collect()
    done = select_time = 0.0
    count = 0
    t0 = time.perf_counter()
    while count < decisions:
        a = time.perf_counter()
        out = s.select(0.0)
        select_time += time.perf_counter() - a
        for d in out:
            s.complete(d.job.id, d.job.estimated_cost)
            s.submit(make_job(d.job.principal, d.band, next(ids), n), 0.0)
        count += len(out)
        if count // 1000 != done:
            done = count // 1000
            for b in s.backends:
                s.update_metrics(
                    b, BackendMetrics(waiting=0, tpot_seconds=0.05, healthy=True, scraped_at=0.0)
                )
    total = time.perf_counter() - t0
    return {"decisions": count, "select_us": 1e6 * select_time / count, "cycle_us": 1e6 * total / count,
            "decisions_per_s": count / select_time}  # fmt: skip


def drain(n: int, queued: int, bands: int) -> dict[str, float]:
    """Everything dispatchable at once: one select call drains the whole queue."""
    ids = itertools.count()
    configs = [BackendConfig("b0", frozenset({"m"}), max_in_flight=10**9, has_metrics=False)]
    s = Scheduler(SchedulerConfig(), configs)
    principals = [Principal(f"t{i % 100}", f"u{i}") for i in range(n)]
    fill(s, principals, queued, bands, ids)
    gc.collect()
    t0 = time.perf_counter()
    out = s.select(0.0)
    dt = time.perf_counter() - t0
    return {"drained": len(out), "drain_us": 1e6 * dt / len(out)}


def memory(n: int, queued: int, bands: int) -> dict[str, float]:
    gc.collect()
    tracemalloc.start()
    s, principals = build(n, queued, 8, bands)
    fill(s, principals, queued, bands, itertools.count())
    current, _peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    jobs = sum(p.queued for p in s.principals.values())
    return {"queued": jobs, "mem_mib": current / 2**20, "bytes_per_job": current / jobs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--principals", default="1000,10000,100000")
    ap.add_argument("--queued", type=int, default=100_000)
    ap.add_argument("--decisions", type=int, default=200_000)
    ap.add_argument("--backends", type=int, default=8)
    ap.add_argument("--bands", type=int, default=3)
    ap.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = ap.parse_args()
    rows = []
    for n in (int(x) for x in args.principals.split(",")):
        row: dict[str, Any] = {"principals": n}
        row.update(steady(n, args.queued, args.decisions, args.backends, args.bands))
        row.update(drain(n, args.queued, args.bands))
        row.update(memory(n, args.queued, args.bands))
        rows.append(row)
    base = rows[0]
    for r in rows:
        r["select_ratio"] = r["select_us"] / base["select_us"]
    if args.json:
        print(json.dumps(rows, indent=2))
        return
    head = f"{'principals':>10} {'queued':>8} {'decisions/s':>12} {'select us':>10} {'cycle us':>9} {'drain us':>9} {'MiB':>7} {'B/job':>6} {'vs first':>8}"
    print(head)
    for r in rows:
        print(f"{r['principals']:>10} {r['queued']:>8} {r['decisions_per_s']:>12,.0f} {r['select_us']:>10.2f} "
              f"{r['cycle_us']:>9.2f} {r['drain_us']:>9.2f} {r['mem_mib']:>7.1f} {r['bytes_per_job']:>6.0f} "
              f"{r['select_ratio']:>7.2f}x")  # fmt: skip


if __name__ == "__main__":
    main()
