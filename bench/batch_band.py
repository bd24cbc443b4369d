"""Batch-band benchmark: a batch of `--lines` chat requests through the Batch API while light
users chat, on one simulator.

Two light users each send a short streamed chat every `--light-interval` seconds; their time to
first token is measured over the whole run. Ways, one after another against a fresh simulator:

  alone      through the gateway, the light users only (the floor their latency can reach)
  batch      through the gateway at the product's defaults: `make run`'s demo as it is, the
             batch uploaded and created with the `openai` SDK by the demo's `nightly-eval` key
             (the batch tier) while the light users use `alice` and `bob` (interactive); the
             gateway runs its lines on the batch band, `BATCH_CONCURRENCY` (8) at a time
  direct     no gateway: the same lines sent straight to the simulator, 64 at a time (what a
             client without a batch API does), beside the light users

Reported: the light users' TTFT p50 and p99 (and their ratio to `alone`), the batch's wall time
and lines per second, and errors. The run ends when the batch has completed (or after
`--timeout` seconds).

    cd bench && ../.venv/bin/python batch_band.py               # about 3 minutes
    cd bench && ../.venv/bin/python batch_band.py --lines 200 --json
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import sys
import time
from typing import Any

import openai
from loadgen import Outcome, client, fmt, percentile, stage, stream_once

MODEL = "demo-llama"
LIGHT = {"model": MODEL, "max_tokens": 8, "stream": True}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lines", type=int, default=1000)
    p.add_argument("--line-tokens", type=int, default=32, help="max_tokens of each batch line.")
    p.add_argument("--light-interval", type=float, default=0.5)
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--speed", type=float, default=10.0, help="The simulator's speed factor.")
    p.add_argument("--timeout", type=float, default=600.0)
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


def lines(args: argparse.Namespace) -> list[dict[str, Any]]:
    return [
        {
            "custom_id": f"line-{i}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {
                "model": MODEL,
                "max_tokens": args.line_tokens,
                "messages": [{"role": "user", "content": f"Summarise document {i}. " * 20}],
            },
        }
        for i in range(args.lines)
    ]


async def light_users(
    base: str, keys: list[str | None], args: argparse.Namespace, done: asyncio.Event
) -> list[Outcome]:
    out: list[Outcome] = []
    t0 = time.monotonic()

    async def user(name: str, key: str | None) -> None:
        async with client() as http:
            n = 0
            while not done.is_set():
                n += 1
                data = {**LIGHT, "messages": [{"role": "user", "content": f"{name} asks {n}"}]}
                out.append(
                    await stream_once(
                        http,
                        base + "/v1/chat/completions",
                        key,
                        data,
                        Outcome("light", name, 0),
                        t0,
                    )
                )
                await asyncio.sleep(args.light_interval)

    await asyncio.gather(*(user(f"light-{i}", key) for i, key in enumerate(keys)))
    return out


async def batch_through_gateway(base: str, key: str, args: argparse.Namespace) -> dict[str, Any]:
    sdk = openai.AsyncOpenAI(base_url=base + "/v1", api_key=key, max_retries=2, timeout=60)
    body = "".join(json.dumps(line) + "\n" for line in lines(args)).encode()
    start = time.monotonic()
    uploaded = await sdk.files.create(file=("lines.jsonl", io.BytesIO(body)), purpose="batch")
    batch = await sdk.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    while batch.status not in ("completed", "failed", "expired", "cancelled"):
        if time.monotonic() - start > args.timeout:
            break
        await asyncio.sleep(0.5)
        batch = await sdk.batches.retrieve(batch.id)
    counts = batch.request_counts
    await sdk.close()
    return {
        "status": batch.status,
        "seconds": time.monotonic() - start,
        "completed": counts.completed if counts else 0,
        "failed": counts.failed if counts else 0,
    }


async def batch_direct(url: str, args: argparse.Namespace) -> dict[str, Any]:
    queue = list(lines(args))
    completed = failed = 0
    start = time.monotonic()

    async def worker(http: Any) -> None:
        nonlocal completed, failed
        while queue:
            line = queue.pop()
            response = await http.post(url + "/v1/chat/completions", json=line["body"])
            if response.status_code == 200:
                completed += 1
            else:
                failed += 1

    async with client() as http:
        await asyncio.gather(*(worker(http) for _ in range(64)))
    status = "completed" if completed == args.lines else "partial"
    return {
        "status": status,
        "seconds": time.monotonic() - start,
        "completed": completed,
        "failed": failed,
    }


async def run_way(way: str, args: argparse.Namespace) -> dict[str, Any]:
    with stage(MODEL, args.max_num_seqs, args.speed) as world:
        done = asyncio.Event()
        if way == "direct":
            light = asyncio.ensure_future(light_users(world.sim.url, [None, None], args, done))
            batch = await batch_direct(world.sim.url, args)
        else:
            gw = world.gateway({"FILES_DIR": str(world.folder / "files")})
            keys = [gw.key("alice"), gw.key("bob")]
            light = asyncio.ensure_future(light_users(gw.url, keys, args, done))
            if way == "alone":
                await asyncio.sleep(30.0)
                batch = {"status": "-", "seconds": None, "completed": 0, "failed": 0}
            else:
                batch = await batch_through_gateway(gw.url, gw.key("nightly-eval"), args)
        done.set()
        outcomes = await light
        ttfts = [o.ttft for o in outcomes if o.ttft is not None]
        return {
            "batch": batch,
            "light_p50": percentile(ttfts, 50),
            "light_p99": percentile(ttfts, 99),
            "light_requests": len(outcomes),
            "light_errors": sum(1 for o in outcomes if o.error),
        }


def table(ways: dict[str, dict[str, Any]]) -> str:
    alone = ways["alone"]
    lines_ = [
        "| way | light TTFT p50 / p99 (ms) | vs alone (p50 / p99) | light requests (errors) "
        "| batch | batch seconds | lines/s |",
        "|---|---|---|---|---|---|---|",
    ]
    for way, r in ways.items():
        b = r["batch"]
        rate = b["completed"] / b["seconds"] if b["seconds"] else None
        lines_.append(
            f"| {way} | {fmt(r['light_p50'], 1000, 0)} / {fmt(r['light_p99'], 1000, 0)} "
            f"| {fmt(r['light_p50'] / alone['light_p50'], 1, 2)}x / "
            f"{fmt(r['light_p99'] / alone['light_p99'], 1, 2)}x "
            f"| {r['light_requests']} ({r['light_errors']}) "
            f"| {b['status']} {b['completed']}/{b['failed']} | {fmt(b['seconds'], 1, 1)} "
            f"| {fmt(rate, 1, 1)} |"
        )
    return "\n".join(lines_)


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ways = {}
    for way in ("alone", "batch", "direct"):
        print(f"running {way} ...", file=sys.stderr)
        ways[way] = await run_way(way, args)
    print(json.dumps(ways) if args.json else table(ways))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
