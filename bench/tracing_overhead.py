"""What tracing costs: one gateway with tracing off, one exporting every request's spans, one
exporting one request in ten, and (with `--before REV`) one whose request path is as it was at a
git revision from before tracing, side by side in one run against one near-instant simulator.

They serve from one database through `manage.py rungateway`, as bench/overhead.py's gateway does
(the same tier and backend changes: no gate holds a request back, ACCESS_LOG false,
USAGE_FLUSH_INTERVAL 1.0). "on" exports with OTLP/HTTP to a span sink on loopback (`python -m
llmserver.testing.otlp`, its own process) at OpenTelemetry's defaults: every request sampled,
spans batched; "sampled" is "on" with `OTEL_TRACES_SAMPLER=parentbased_traceidratio` and
`OTEL_TRACES_SAMPLER_ARG=0.1`. "before" is a copy of this work tree (tracked and untracked files
as they are now) with the files tracing changed on the request path (`REQUEST_PATH`) as they
were at REV, served from a temporary directory by the same interpreter: everything else is the
same code, so the difference is the change to the request path alone. Each round drives every
target in turn, in a rotated order, with bench/overhead.py's phases (`c1`: one request at a
time; `c64`: 64 clients, non-streaming); the table has each target's median over the rounds and
its ratios to the baseline (before, else off). The load generator shares this machine's cores
with the gateways and the simulator: read the ratios, measured side by side, not the absolute
figures.

On SQLite the four processes' writers contend for its one lock ("database is locked" in the log,
a round stalled now and then); with `DATABASE_URL` naming a PostgreSQL server they share a fresh
database on it, as production would.

008d438 is the commit tracing was built on (docs/BENCHMARKS.md, "Tracing"):

    .venv/bin/python bench/tracing_overhead.py --before 008d438
    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres \
        .venv/bin/python bench/tracing_overhead.py --before 008d438 --rounds 6 --duration 4 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
from loadgen import configure_gateway
from overhead import gateway_setup, run_phase

from llmserver.testing.processes import (
    ROOT,
    Database,
    GatewayProcess,
    serve,
    start_gateway,
    stop,
    wait_healthy,
)
from simulator.launcher import free_port, start_simulator

METRICS = ("requests_per_second", "p50_ms", "p99_ms", "gateway_cpu_ms_per_request")
# What tracing changed on a request's way (the rest is set-up, read once at the start).
REQUEST_PATH = (
    "llmserver/api/http.py",
    "llmserver/pipeline/completion.py",
    "llmserver/pipeline/relay.py",
    "llmserver/backends/upstream.py",
)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", metavar="REV", help="A git revision from before tracing.")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--duration", type=float, default=6.0, help="Seconds per phase and target.")
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--concurrency", type=int, default=64)
    p.add_argument("--max-tokens", type=int, default=4)
    p.add_argument("--stream-tokens", type=int, default=64)
    p.add_argument("--phases", default="c1,c64")
    p.add_argument("--json", action="store_true")
    p.set_defaults(profile=None, profile_phase=None)  # bench/overhead.py's, unused here
    return p.parse_args(argv)


def git(*args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, check=True).stdout


def before_tree(rev: str, into: Path) -> Path:
    """This work tree copied, with REQUEST_PATH as at `rev` (nothing of the repository's own is
    changed: files are read, `git show` prints)."""
    listed = git("ls-files", "-z", "--cached", "--others", "--exclude-standard")
    for name in {n for n in listed.decode().split("\0") if n}:
        source = ROOT / name
        if source.is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, into / name)
    for name in REQUEST_PATH:
        (into / name).write_bytes(git("show", f"{rev}:{name}"))
    return into


def serve_from(tree: Path, env: dict[str, str]) -> GatewayProcess:
    """`manage.py rungateway` of another tree (its packages first on the path), as `serve` does."""
    port = free_port()
    command = [sys.executable, "manage.py", "rungateway", "--host", "127.0.0.1"]
    process = subprocess.Popen(
        [*command, "--port", str(port)], cwd=tree, env=env, stdout=subprocess.DEVNULL
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url + "/healthz", process)
    except Exception:
        stop(process)
        raise
    return GatewayProcess(url, process, env)


def start_sink() -> tuple[str, subprocess.Popen[bytes]]:
    port = free_port()
    command = [sys.executable, "-m", "llmserver.testing.otlp", "--port", str(port)]
    process = subprocess.Popen(command, cwd=ROOT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while True:
        try:
            httpx.get(url + "/count", timeout=1)
            return url, process
        except httpx.HTTPError:
            if process.poll() is not None or time.monotonic() > deadline:
                stop(process)
                raise RuntimeError("the span sink did not start") from None
            time.sleep(0.1)


async def measure(args: argparse.Namespace) -> dict[str, Any]:
    phases = [p.strip() for p in args.phases.split(",") if p.strip()]
    sim = start_simulator(
        *("--max-num-seqs", "1024", "--base-step-ms", "0.05", "--per-seq-ms", "0"),
        *("--prefill-ms-per-token", "0", "--scheduling-policy", "fcfs", "--model", "demo-llama"),
        quiet=True,
    )
    tmp = tempfile.TemporaryDirectory(prefix="bench-tracing-")
    db, gateways, sink = None, {}, None
    try:
        db = Database(Path(tmp.name))
        off = start_gateway(
            db.url, sim.url, {"USAGE_FLUSH_INTERVAL": "1.0"}, quiet=True, rungateway=True
        )
        gateways["off"] = off
        tiers, keys = gateway_setup()
        secret = configure_gateway(off, tiers, keys, {"simulator": {"max_in_flight": 100_000}})
        sink_url, sink = start_sink()
        on_env = {**off.env, "OTEL_EXPORTER_OTLP_ENDPOINT": sink_url}
        gateways["on"] = serve(on_env, off.demo, (), True, True, ())
        one_in_ten = {"OTEL_TRACES_SAMPLER": "parentbased_traceidratio"}
        one_in_ten["OTEL_TRACES_SAMPLER_ARG"] = "0.1"
        gateways["sampled"] = serve({**on_env, **one_in_ten}, off.demo, (), True, True, ())
        if args.before:
            tree = before_tree(args.before, Path(tmp.name) / "before")
            gateways["before"] = serve_from(tree, off.env)
        names = list(gateways)
        samples: dict[str, dict[str, list[dict[str, Any]]]] = {}
        requests_on = 0
        for round_ in range(args.rounds):
            order = names[round_ % len(names) :] + names[: round_ % len(names)]
            for phase in phases:
                for name in order:
                    gw = gateways[name]
                    print(f"round {round_ + 1} {phase} {name} ...", file=sys.stderr, flush=True)
                    pids = {"gateway": gw.process.pid, "simulator": sim.process.pid}
                    result = await run_phase(phase, name, gw.url, secret["bench"], pids, args)
                    samples.setdefault(phase, {}).setdefault(name, []).append(result)
                    if name == "on":
                        requests_on += result["requests"]
        await asyncio.sleep(6)  # the exporter's last batch (OpenTelemetry's 5 s schedule)
        spans = httpx.get(sink_url + "/count", timeout=5).json()["spans"]
        return {"samples": samples, "spans_exported": spans, "requests_on_measured": requests_on}
    finally:
        for gw in gateways.values():
            gw.stop()
        if sink is not None:
            stop(sink)
        if db is not None:
            db.drop()
        sim.stop()
        tmp.cleanup()


def medians(samples: dict[str, dict[str, list[dict[str, Any]]]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for phase, by_target in samples.items():
        for target, runs in by_target.items():
            out.setdefault(phase, {})[target] = {
                metric: statistics.median(run[metric] for run in runs) for metric in METRICS
            } | {"errors": sum(run["errors"] for run in runs)}
    return out


def table(summary: dict[str, Any]) -> str:
    lines = [
        "| phase | target | req/s | p50 ms | p99 ms | gateway CPU ms/req | req/s ratio "
        "| CPU ms/req ratio | errors |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for phase, by_target in summary.items():
        base = by_target.get("before") or by_target["off"]
        for target, m in by_target.items():
            rps = m["requests_per_second"] / base["requests_per_second"]
            cpu = m["gateway_cpu_ms_per_request"] / base["gateway_cpu_ms_per_request"]
            lines.append(
                f"| {phase} | {target} | {m['requests_per_second']:.0f} | {m['p50_ms']:.2f} "
                f"| {m['p99_ms']:.2f} | {m['gateway_cpu_ms_per_request']:.3f} | {rps:.3f} "
                f"| {cpu:.3f} | {m['errors']} |"
            )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    os.chdir(ROOT)
    result = asyncio.run(measure(args))
    summary = medians(result["samples"])
    if args.json:
        print(json.dumps({"settings": vars(args), "summary": summary, **result}, indent=2))
    else:
        print(table(summary))
        on = result["requests_on_measured"]
        print(
            f"\nspans received by the sink: {result['spans_exported']} "
            f"({result['spans_exported'] / max(on, 1):.2f} per measured request of 'on'; "
            "its warm-ups send spans too)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
