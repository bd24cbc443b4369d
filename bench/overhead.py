"""GatewayProcess overhead benchmark: what one gateway process costs in front of a near-instant backend.

The simulator runs with a near-zero step time and room for 1024 sequences, so almost all of the
time measured is HTTP and gateway work. Each phase runs straight to the simulator and then
through the gateway, side by side in one invocation:

  c1      one request at a time, non-streaming: latency p50/p99, and the gateway's added latency
  c64     64 concurrent closed-loop clients, non-streaming: latency and requests/s
  stream  64 concurrent clients, streaming `--stream-tokens` tokens: SSE chunks/s

Also reported: CPU milliseconds per request of the gateway and simulator processes (from
/proc/<pid>/stat). The gateway is served as production serves it (`manage.py rungateway`);
`--server daphne` runs the bare daphne command instead. `--floor` adds a third target,
bench/floor_proxy.py: daphne relaying over the same aiohttp hop and doing nothing else, so the
gateway's added cost splits into the stack's floor and LLM-Server's own work. The load generator is one asyncio process
with a minimal HTTP/1.1 client (bench/rawhttp.py); it competes with the gateway and the simulator
for this machine's cores, so read the figures as ratios from one run. `--profile out.txt` records
the gateway with py-spy (the `bench` extra; the thread holding the GIL) during one phase and
prints its top items.

No way runs at the product's defaults: the benchmark measures the gateway's own cost, so no
gate may hold a request back and none may be refused. The gateway target (every phase, either
server) changes: max_in_flight 100,000 on the demo's backend (product 64), so no gate holds a
request back; on the demo's interactive tier max_concurrent_per_user and max_queued_per_user
100,000 and queue_timeout_seconds 600 (demo 4, 64 and 60 s), as one key sends all the load;
ACCESS_LOG false (start_gateway's `quiet`; product true), as its line per request would go to
this terminal, so that line's cost is left out (`--env ACCESS_LOG=true` puts it back).
USAGE_FLUSH_INTERVAL is the product's 1.0 s (`--usage-flush-interval`), not the tests' 0.1;
the backend's learned capacity and preemption and the tier's gates are as the demo has them.
`--server daphne` changes only the server (production runs rungateway); `--env` may change any
other setting. The direct and floor targets have no gateway.

    .venv/bin/python bench/overhead.py
    .venv/bin/python bench/overhead.py --duration 5 --json
    .venv/bin/python bench/overhead.py --phases c64 --profile /tmp/gw.txt
    .venv/bin/python bench/overhead.py --floor --phases c1,stream
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from loadgen import body, configure_gateway, fmt, percentile
from rawhttp import Connection, build_request

from llmserver.testing.processes import Database, start_gateway, stop
from simulator.launcher import free_port, start_simulator

PATH = "/v1/chat/completions"
PHASES = ("c1", "c64", "stream")
CLK_TCK = os.sysconf("SC_CLK_TCK")
# Frames on nearly every sampled stack, which say nothing about where the time went.
PLUMBING = {
    "plumbing",
    "daphne",
    "asyncio",
    "asgiref",
    "threading",
    "concurrent",
    "selectors",
    "<module>",
}
PLUMBING_PATHS = (
    "twisted/python/",
    "daphne/cli",
    "manage.py",
    "django/core/management/",
    "llmserver/management/",
)
PLUMBING_FUNCTIONS = {"DrainingServer.run", "AsyncioSelectorReactor.run", "Server.run"}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=8.0, help="Seconds per phase and target.")
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=4, help="Non-streaming completion length.")
    p.add_argument("--stream-tokens", type=int, default=64)
    p.add_argument("--phases", default=",".join(PHASES))
    p.add_argument(
        "--usage-flush-interval",
        default="1.0",
        help="USAGE_FLUSH_INTERVAL for the gateway: the production default (start_gateway's "
        "own default is the tests' 0.1 s).",
    )
    p.add_argument("--server", choices=("rungateway", "daphne"), default="rungateway")
    p.add_argument(
        "--daphne-args", default="", help='Extra flags for --server daphne, e.g. "-v 0".'
    )
    p.add_argument(
        "--env",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="An extra environment variable for the gateway (repeatable).",
    )
    p.add_argument("--profile", type=Path, help="py-spy raw output for the gateway.")
    p.add_argument(
        "--profile-phase", choices=PHASES, help="The phase to profile; default: the first run."
    )
    p.add_argument("--profile-top", type=int, default=15, help="How many profile items to list.")
    p.add_argument(
        "--floor", action="store_true", help="Also run bare daphne relaying (floor_proxy.py)."
    )
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLK_TCK


async def worker(
    url: str, request: bytes, deadline: float, latencies: list[float], counts: list[int]
) -> None:
    conn = Connection(url)
    try:
        while time.perf_counter() < deadline:
            start = time.perf_counter()
            status, _size, events = await conn.send(request)
            if status != 200:
                counts[1] += 1
                continue
            latencies.append(time.perf_counter() - start)
            counts[0] += 1
            counts[2] += events
    finally:
        await conn.close()


async def drive(url: str, request: bytes, concurrency: int, seconds: float) -> dict[str, Any]:
    latencies: list[float] = []
    counts = [0, 0, 0]  # ok, errors, SSE events
    start = time.perf_counter()
    deadline = start + seconds
    await asyncio.gather(
        *(worker(url, request, deadline, latencies, counts) for _ in range(concurrency))
    )
    wall = time.perf_counter() - start
    return {
        "requests": counts[0],
        "errors": counts[1],
        "requests_per_second": counts[0] / wall,
        "chunks_per_second": counts[2] / wall,
        "p50_ms": (percentile(latencies, 50) or 0) * 1000,
        "p99_ms": (percentile(latencies, 99) or 0) * 1000,
        "wall": wall,
    }


def phase_request(phase: str, url: str, key: str | None, args: argparse.Namespace) -> bytes:
    if phase == "stream":
        return build_request(url, PATH, body("Stream to me.", args.stream_tokens, True), key)
    return build_request(url, PATH, body("Say hello.", args.max_tokens, False), key)


async def run_phase(
    phase: str,
    target: str,
    url: str,
    key: str | None,
    pids: dict[str, int],
    args: argparse.Namespace,
) -> dict[str, Any]:
    request = phase_request(phase, url, key, args)
    concurrency = 1 if phase == "c1" else args.concurrency
    await drive(url, request, concurrency, args.warmup)
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    profiler = None
    profiled = args.profile_phase or args.phases.split(",")[0].strip()
    if args.profile and target == "gateway" and phase == profiled:
        profiler = start_profiler(pids["gateway"], args.profile, args.duration)
    result = await drive(url, request, concurrency, args.duration)
    if profiler is not None:
        profiler.wait(timeout=args.duration + 30)
    for name, pid in pids.items():
        used = cpu_seconds(pid) - before[name]
        result[f"{name}_cpu_ms_per_request"] = used * 1000 / max(result["requests"], 1)
        result[f"{name}_cpu_fraction"] = used / result["wall"]
    return result


PY_SPY = Path(sys.executable).with_name("py-spy")


def start_profiler(pid: int, out: Path, seconds: float) -> subprocess.Popen[bytes]:
    command = [str(PY_SPY), "record", "--pid", str(pid), "--duration", str(int(seconds))]
    # --gil: only the thread holding the GIL is sampled, so a worker thread waiting for the GIL
    # (the usage writer while the event loop runs) does not count as time spent.
    command += ["--rate", "250", "--format", "raw", "--output", str(out), "--nonblocking"]
    command += ["--gil"]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def start_floor(upstream: str) -> tuple[str, subprocess.Popen[bytes]]:
    """bench/floor_proxy.py under daphne on a free loopback port, once it accepts connections."""
    port = free_port()
    command = [str(Path(sys.executable).with_name("daphne")), "-b", "127.0.0.1", "-p", str(port)]
    process = subprocess.Popen(
        [*command, "floor_proxy:application"],
        cwd=Path(__file__).parent,
        env={**os.environ, "FLOOR_UPSTREAM": upstream},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 30
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return f"http://127.0.0.1:{port}", process
        except OSError:
            if process.poll() is not None or time.monotonic() > deadline:
                stop(process)
                raise RuntimeError("floor_proxy did not start") from None
            time.sleep(0.1)


def gateway_setup() -> tuple[dict, list]:
    tiers = {
        "interactive": {
            "max_concurrent_per_user": 100_000,
            "max_queued_per_user": 100_000,
            "queue_timeout_seconds": 600.0,
        }
    }
    return tiers, [("bench", "interactive", "chat")]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    sim = start_simulator(
        *("--max-num-seqs", "1024", "--base-step-ms", "0.05", "--per-seq-ms", "0"),
        *("--prefill-ms-per-token", "0", "--scheduling-policy", "fcfs", "--model", "demo-llama"),
        quiet=True,
    )
    tmp = tempfile.TemporaryDirectory(prefix="bench-overhead-")
    db = gw = floor = None
    try:
        db = Database(Path(tmp.name))
        env = {"USAGE_FLUSH_INTERVAL": args.usage_flush_interval}
        env.update(item.split("=", 1) for item in args.env)
        gw = start_gateway(
            db.url,
            sim.url,
            env,
            daphne_args=args.daphne_args.split(),
            quiet=True,
            rungateway=args.server == "rungateway",
        )
        tiers, keys = gateway_setup()
        secret = configure_gateway(gw, tiers, keys, {"simulator": {"max_in_flight": 100_000}})
        targets = {
            "direct": (sim.url, None, {"simulator": sim.process.pid}),
            "gateway": (
                gw.url,
                secret["bench"],
                {"simulator": sim.process.pid, "gateway": gw.process.pid},
            ),
        }
        if args.floor:
            floor_url, floor = start_floor(sim.url)
            pids = {"simulator": sim.process.pid, "gateway": floor.pid}
            targets["floor"] = (floor_url, None, pids)
        results: dict[str, Any] = {}
        for phase in phases:
            for target, (url, key, pids) in targets.items():
                print(f"{phase} {target} ...", file=sys.stderr, flush=True)
                results.setdefault(phase, {})[target] = await run_phase(
                    phase, target, url, key, pids, args
                )
        return results
    finally:
        if floor is not None:
            stop(floor)
        if gw is not None:
            gw.stop()
        if db is not None:
            db.drop()
        sim.stop()
        tmp.cleanup()


def profile_items(raw: Path, top: int) -> dict[str, list[tuple[str, float]]]:
    """The profile's top items from py-spy's raw output (one `frame;frame;... count` line per
    stack): `functions`, the share of samples with the function anywhere on the stack, leaving
    out the plumbing every stack passes through (the event loop, the thread pool, Twisted's
    logging context); `packages`, the share of samples whose innermost frame is in the package
    (where the CPU went itself)."""
    inclusive: Counter[str] = Counter()
    packages: Counter[str] = Counter()
    total = 0
    for line in raw.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not count.isdigit():
            continue
        n = int(count)
        total += n
        frames = [_frame(f) for f in stack.split(";")]
        for name in {name for name, package in frames if package not in PLUMBING}:
            inclusive[name] += n
        packages[frames[-1][1]] += n
    if not total:
        return {"functions": [], "packages": []}
    return {
        "functions": [(name, n / total) for name, n in inclusive.most_common(top)],
        "packages": [(name, n / total) for name, n in packages.most_common(top)],
    }


def _frame(frame: str) -> tuple[str, str]:
    """`func (pkg/mod.py:12)` -> ("func (pkg/mod.py)", "pkg"); Twisted's two helper packages
    count as their own, to leave them out as plumbing."""
    name, _, where = frame.rpartition(" (")
    path = where.rstrip(")").rsplit(":", 1)[0]
    package = path.split("/", 1)[0].removesuffix(".py") or "?"
    if path.startswith(PLUMBING_PATHS) or name in PLUMBING_FUNCTIONS:
        package = "plumbing"
    return f"{name} ({path})", package


def profile_table(items: dict[str, list[tuple[str, float]]]) -> str:
    lines = ["", "| profile: function (on the stack) | share |", "|---|---|"]
    lines += [f"| {name} | {share:.1%} |" for name, share in items["functions"]]
    lines += ["", "| profile: package (innermost frame) | share |", "|---|---|"]
    lines += [f"| {name} | {share:.1%} |" for name, share in items["packages"]]
    return "\n".join(lines)


def ratio(a: float, b: float) -> float | None:
    return a / b if b else None


def table(results: dict[str, Any]) -> str:
    lines = [
        "| phase | target | req/s | chunks/s | p50 ms | p99 ms | gateway CPU ms/req "
        "| simulator CPU ms/req | errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for phase, by_target in results.items():
        for target, r in by_target.items():
            lines.append(
                f"| {phase} | {target} | {r['requests_per_second']:.0f} "
                f"| {r['chunks_per_second']:.0f} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} "
                f"| {fmt(r.get('gateway_cpu_ms_per_request'), 1, 3)} "
                f"| {fmt(r.get('simulator_cpu_ms_per_request'), 1, 3)} | {r['errors']} |"
            )
    lines += ["", "| phase | over direct | added p50 ms | added p99 ms | req/s ratio "]
    lines[-1] += "| chunks/s ratio |"
    lines.append("|---|---|---|---|---|---|")
    for phase, s in summary(results).items():
        for target, prefix in (("gateway", ""), ("floor", "floor_")):
            if f"{prefix}added_p50_ms" not in s:
                continue
            lines.append(
                f"| {phase} | {target} | {s[prefix + 'added_p50_ms']:.2f} "
                f"| {s[prefix + 'added_p99_ms']:.2f} "
                f"| {fmt(s[prefix + 'requests_per_second_ratio'], 1, 3)} "
                f"| {fmt(s[prefix + 'chunks_per_second_ratio'], 1, 3)} |"
            )
    return "\n".join(lines)


def summary(results: dict[str, Any]) -> dict[str, Any]:
    """Per phase, what the gateway adds over direct and its ratios; with --floor, the same for
    the floor ("floor_" keys)."""
    out: dict[str, Any] = {}
    for phase, by_target in results.items():
        d = by_target["direct"]
        out[phase] = {}
        for target, prefix in (("gateway", ""), ("floor", "floor_")):
            g = by_target.get(target)
            if g is None:
                continue
            out[phase] |= {
                f"{prefix}added_p50_ms": g["p50_ms"] - d["p50_ms"],
                f"{prefix}added_p99_ms": g["p99_ms"] - d["p99_ms"],
                f"{prefix}requests_per_second_ratio": ratio(
                    g["requests_per_second"], d["requests_per_second"]
                ),
                f"{prefix}chunks_per_second_ratio": ratio(
                    g["chunks_per_second"], d["chunks_per_second"]
                ),
            }
    return out


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.profile and not PY_SPY.exists():
        sys.exit(f"--profile needs py-spy ({PY_SPY}): `make bench` installs the bench extra")
    results = asyncio.run(run(args))
    profile = profile_items(args.profile, args.profile_top) if args.profile else None
    if args.json:
        settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
        out = {"settings": settings, "results": results, "summary": summary(results)}
        if profile is not None:
            out["profile"] = profile
        print(json.dumps(out, indent=2))
    else:
        print(table(results))
        if profile is not None:
            print(profile_table(profile))
    return 0


if __name__ == "__main__":
    sys.exit(main())
