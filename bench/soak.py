"""Soak: does one gateway's memory and CPU level off under a long, steady load from many users?

A gateway (`manage.py rungateway`, as production serves it) in front of a fast simulator takes
`--rate` requests per second for `--duration` seconds, each from the next of `--users` users
(one key each, in turn, so every user is seen, then idle, then seen again), then stands idle for
`--idle` seconds. Every `--sample` seconds it records the gateway's resident memory
(/proc/PID/status VmRSS) and CPU (/proc/PID/stat). Reported side by side from one run:

  growth    RSS added per request over the first and the second half of the load (bytes);
            a plateau is a second half that adds a small fraction of the first's
  idle      the gateway's CPU share while nothing is sent, after the load, against before
            it (when only the demo's keys were known), and RSS after the idle time

One way, at the product's defaults (the demo's tiers, its backend's max_in_flight and the
gateway's settings as shipped, USAGE_FLUSH_INTERVAL included). What it changes: the simulator
steps fast (0.2 ms a step, 256 sequences) so that the gateway, not the engine, is what runs for
ten minutes; ACCESS_LOG false (`start_gateway`'s `quiet`; product true), as its line per request
would go to this terminal; and the users' keys are on the demo's interactive tier.

    .venv/bin/python bench/soak.py                         # about 11 minutes
    .venv/bin/python bench/soak.py --duration 120 --idle 20 --users 2000
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen import body, configure_gateway, fmt
from rawhttp import Connection, build_request

from llmserver.testing.processes import Database, GatewayProcess, start_gateway
from simulator.launcher import start_simulator

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")
PATH = "/v1/chat/completions"
PROMPT = "Say something short about the weather today, user "


@dataclass
class Sample:
    """The gateway process at one moment of the run."""

    at: float
    requests: int
    rss: int
    cpu: float  # seconds of CPU since the process started
    phase: str


@dataclass
class Tally:
    sent: int = 0
    ok: int = 0
    errors: dict[str, int] = field(default_factory=dict)


def rss_bytes(pid: int) -> int:
    with open(f"/proc/{pid}/statm") as f:
        return int(f.read().split()[1]) * PAGE


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--users", type=int, default=20_000, help="distinct users, one key each")
    p.add_argument("--rate", type=float, default=100.0, help="requests per second, steady")
    p.add_argument("--duration", type=float, default=600.0, help="seconds of load")
    p.add_argument("--idle", type=float, default=60.0, help="seconds idle before and after")
    p.add_argument("--sample", type=float, default=10.0, help="seconds between samples")
    p.add_argument("--max-tokens", type=int, default=8)
    p.add_argument("--connections", type=int, default=32, help="keep-alive connections")
    p.add_argument("--json", action="store_true", help="print the result as JSON")
    return p.parse_args(argv)


def user_keys(gw: GatewayProcess, users: int) -> list[str]:
    """Create the users' keys in batches (one apply_config call per batch)."""
    secrets: list[str] = []
    batch = 5_000
    for start in range(0, users, batch):
        names = [f"soak-{i:06d}" for i in range(start, min(users, start + batch))]
        made = configure_gateway(gw, {}, [(n, "interactive", "chat") for n in names])
        secrets.extend(made[n] for n in names)
    return secrets


async def sample_every(
    pid: int, every: float, tally: Tally, samples: list[Sample], phase: list[str], t0: float
) -> None:
    while True:
        samples.append(
            Sample(time.monotonic() - t0, tally.sent, rss_bytes(pid), cpu_seconds(pid), phase[0])
        )
        await asyncio.sleep(every)


async def drive(url: str, secrets: list[str], args: argparse.Namespace, tally: Tally) -> None:
    """`--connections` keep-alive connections share a steady schedule: request n is due at
    n / rate, and goes out on the next free connection (bench/rawhttp.py: the load generator
    shares the two cores, so it must cost little). A connection that breaks is opened again."""
    total = int(args.rate * args.duration)
    due = iter(range(total))
    start = time.monotonic()

    async def worker() -> None:
        conn = Connection(url)
        try:
            for n in due:
                delay = start + n / args.rate - time.monotonic()
                if delay > 0:
                    await asyncio.sleep(delay)
                i = n % len(secrets)
                data = body(f"{PROMPT}{i}.", args.max_tokens, stream=False)
                tally.sent += 1
                try:
                    status, _, _ = await conn.send(build_request(url, PATH, data, secrets[i]))
                except (OSError, asyncio.IncompleteReadError, ValueError) as exc:
                    name = type(exc).__name__
                    tally.errors[name] = tally.errors.get(name, 0) + 1
                    await conn.close()
                    conn = Connection(url)
                    continue
                if status == 200:
                    tally.ok += 1
                else:
                    tally.errors[str(status)] = tally.errors.get(str(status), 0) + 1
        finally:
            await conn.close()

    await asyncio.gather(*(worker() for _ in range(args.connections)))


def cpu_share(samples: list[Sample], phase: str) -> float | None:
    """CPU seconds per wall second over the samples of `phase` (first to last)."""
    mine = [s for s in samples if s.phase == phase]
    if len(mine) < 2 or mine[-1].at <= mine[0].at:
        return None
    return (mine[-1].cpu - mine[0].cpu) / (mine[-1].at - mine[0].at)


def growth(samples: list[Sample]) -> tuple[float | None, float | None]:
    """RSS bytes added per request over the first and the second half of the load."""
    load = [s for s in samples if s.phase == "load"]
    if len(load) < 3:
        return None, None
    mid = load[len(load) // 2]

    def per_request(a: Sample, b: Sample) -> float | None:
        return (b.rss - a.rss) / (b.requests - a.requests) if b.requests > a.requests else None

    return per_request(load[0], mid), per_request(mid, load[-1])


async def run(args: argparse.Namespace) -> dict[str, Any]:
    sim = start_simulator(
        *("--max-num-seqs", "256", "--base-step-ms", "0.2", "--per-seq-ms", "0"),
        *("--prefill-ms-per-token", "0", "--model", "demo-llama"),
        quiet=True,
    )
    tmp = tempfile.TemporaryDirectory(prefix="bench-soak-")
    db = gw = None
    try:
        db = Database(Path(tmp.name))
        gw = start_gateway(db.url, sim.url, quiet=True, rungateway=True)
        print(f"creating {args.users} keys ...", file=sys.stderr, flush=True)
        secrets = user_keys(gw, args.users)
        pid = gw.process.pid
        tally = Tally()
        samples: list[Sample] = []
        phase = ["before"]
        t0 = time.monotonic()
        sampler = asyncio.create_task(sample_every(pid, args.sample, tally, samples, phase, t0))
        await asyncio.sleep(args.idle)
        phase[0] = "load"
        samples.append(Sample(time.monotonic() - t0, 0, rss_bytes(pid), cpu_seconds(pid), "load"))
        print(f"load: {args.rate} req/s for {args.duration} s ...", file=sys.stderr, flush=True)
        await drive(gw.url, secrets, args, tally)
        end = Sample(time.monotonic() - t0, tally.sent, rss_bytes(pid), cpu_seconds(pid), "load")
        samples.append(end)
        phase[0] = "after"
        samples.append(Sample(end.at, tally.sent, end.rss, end.cpu, "after"))
        print(f"idle for {args.idle} s ...", file=sys.stderr, flush=True)
        await asyncio.sleep(args.idle)
        sampler.cancel()
        samples.append(
            Sample(time.monotonic() - t0, tally.sent, rss_bytes(pid), cpu_seconds(pid), "after")
        )
        first, second = growth(samples)
        return {
            "users": args.users,
            "rate": args.rate,
            "duration": args.duration,
            "sent": tally.sent,
            "ok": tally.ok,
            "errors": tally.errors,
            "rss_start_mb": samples[0].rss / 2**20,
            "rss_end_of_load_mb": end.rss / 2**20,
            "rss_after_idle_mb": samples[-1].rss / 2**20,
            "growth_first_half_bytes_per_request": first,
            "growth_second_half_bytes_per_request": second,
            "idle_cpu_before": cpu_share(samples, "before"),
            "idle_cpu_after": cpu_share(samples, "after"),
            "load_cpu": cpu_share(samples, "load"),
            "samples": [s.__dict__ for s in samples],
        }
    finally:
        if gw is not None:
            gw.stop()
        if db is not None:
            db.drop()
        sim.stop()
        tmp.cleanup()


def report(r: dict[str, Any]) -> str:
    lines = [
        f"{r['users']} users, {r['rate']:.0f} req/s for {r['duration']:.0f} s: "
        f"{r['sent']} sent, {r['ok']} ok, errors {r['errors'] or 'none'}",
        "",
        f"{'t (s)':>7} {'phase':>7} {'requests':>9} {'RSS (MB)':>9} {'CPU (s)':>8}",
    ]
    for s in r["samples"]:
        lines.append(
            f"{s['at']:7.0f} {s['phase']:>7} {s['requests']:9d} "
            f"{s['rss'] / 2**20:9.1f} {s['cpu']:8.1f}"
        )
    first = r["growth_first_half_bytes_per_request"]
    second = r["growth_second_half_bytes_per_request"]
    lines += [
        "",
        f"RSS: {r['rss_start_mb']:.1f} MB before, {r['rss_end_of_load_mb']:.1f} MB at the end "
        f"of the load, {r['rss_after_idle_mb']:.1f} MB after the idle time",
        f"growth per request: first half {fmt(first, digits=0)} B, "
        f"second half {fmt(second, digits=0)} B",
        f"CPU share: idle before {fmt(r['idle_cpu_before'], 100, 1)}%, under load "
        f"{fmt(r['load_cpu'], 100, 1)}%, idle after {fmt(r['idle_cpu_after'], 100, 1)}%",
    ]
    return "\n".join(lines)


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    result = await run(args)
    print(json.dumps(result, indent=2) if args.json else report(result))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
