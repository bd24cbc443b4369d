"""The mini flood on a real engine: do light users keep their turn in front of llama-server?

One llama.cpp `llama-server` (Gemma 3 270M Q4_K_M, `-np 4 --metrics`, built by
`make realengine`) serves every way in turn, each started when the engine is idle:

  direct     straight to llama-server: its FIFO of deferred tasks
  llamacpp   through the gateway, backend kind `llamacpp`: the gate reads the engine's metrics
             (requests_deferred against the interactive tier's gate_max_waiting)
  openai     through the gateway, backend kind `openai` with max_in_flight 4: no metrics,
             a concurrency cap equal to the engine's slots (how an operator tried it first)
  llamacpp-preempt  kind `llamacpp` with its capacity read from /props, the interactive gate
             keeping llama-server's own queue empty (gate_max_waiting 1, no TPOT ceiling) and
             preemption: a light request waiting 150 ms pauses a power stream, continued later
The first three run with preemption off (the tier's preempt_after_ms blank).
  ideal      the light users alone, straight to llama-server

No way runs at the product's defaults: the closest, llamacpp-preempt, turns the TPOT ceiling
off, as on two shared CPU cores this engine is always slower than the 150 ms a GPU is held to
and the gate would only stop everyone. Every gateway way changes: the demo's `simulator` backend
disabled and a backend `llama` added (capacity blank, preemption on, max_in_flight 64 unless
said below), so that only llama-server serves the demo's model; on the demo's interactive tier
max_concurrent_per_user 64, max_queued_per_user 1000 and queue_timeout_seconds 3600 (demo 4,
64 and 60 s), as the power user's 48 requests at once exceed the limits by design and on a slow
engine its last ones have waited over a minute (docs/BENCHMARKS.md). Each way then changes:

  llamacpp   preempt_after_ms blank (default 150): the gate alone is measured, as in the first
             run, before preemption existed. Its gates are the demo's, but with the backend's
             preemption on and its capacity read from /props the gateway keeps llama-server's
             own queue empty whatever gate_max_waiting says (`scheduling/gate.py`)
  openai     kind `openai` (no metrics read: no gate, no capacity), max_in_flight 4 (`--slots`;
             product 64) and preempt_after_ms blank: a concurrency cap alone, as an operator
             first tried it
  llamacpp-preempt  preempt_after_ms 150 as by default; gate_max_waiting 1 (demo 3): a request
             queued inside the engine is one a light user waits behind; gate_max_tpot_ms blank
             (demo 150), for the reason above

Like the tests' gateways (start_gateway), every gateway way runs under the bare daphne command
rather than rungateway, with USAGE_FLUSH_INTERVAL 0.1 s (product 1.0) and ACCESS_LOG false
(product true); none of these is a scheduling setting.

The load: a power user sends `--power-requests` streaming requests at once; `--light-users`
users each send one short streaming request every `--light-interval` s for `--duration` s. All
users are on the interactive tier, so the gateway's fair share (not band priority) is measured.
Reported: light and power time to first token (p50/p99), failures, power makespan.

    .venv/bin/python bench/realengine_flood.py            # about 4 minutes on two cores
    .venv/bin/python bench/realengine_flood.py --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from loadgen import (
    MODEL,
    Outcome,
    body,
    client,
    configure_gateway,
    fmt,
    percentile,
    stream_once,
)

from llmserver.testing.llama_server import ALIAS, LlamaServer, missing, start_llama_server
from llmserver.testing.processes import Database, start_gateway
from llmserver.testing.vllm_server import VllmServer

WAYS = ("direct", "llamacpp", "openai", "llamacpp-preempt", "ideal")
POWER_PROMPT = "Write a long story about a lighthouse keeper."
LIGHT_PROMPT = "Say hello."


def parse_args(
    argv: list[str] | None = None, ways: tuple[str, ...] = WAYS, doc: str | None = __doc__
) -> argparse.Namespace:
    """The flood's options; bench/vllm_flood.py shares them with its own ways."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--ways", default=",".join(ways))
    p.add_argument("--slots", type=int, default=4, help="the engine's slots (-np, --max-num-seqs)")
    p.add_argument("--power-requests", type=int, default=48)
    p.add_argument("--power-max-tokens", type=int, default=64)
    p.add_argument("--light-users", type=int, default=3)
    p.add_argument("--light-interval", type=float, default=3.0)
    p.add_argument("--light-max-tokens", type=int, default=16)
    p.add_argument("--duration", type=float, default=30.0)
    p.add_argument("--light-delay", type=float, default=1.0, help="after the power burst")
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


async def run_load(url: str, args: argparse.Namespace, keys: dict[str, str] | None,
                   with_power: bool, model: str = MODEL,
                   priority: dict[str, int] | None = None) -> tuple[list[Outcome], float]:  # fmt: skip
    """The flood; `priority` (class -> value) marks each class's requests for an engine that
    schedules by priority."""
    marks = priority or {}
    endpoint = url + "/v1/chat/completions"
    tasks: list[asyncio.Task[Outcome]] = []
    async with client() as http:
        t0 = time.monotonic()

        def launch(user: str, cls: str, data: dict[str, Any]) -> None:
            key = keys[user] if keys else None
            outcome = Outcome(cls, user, 0.0)
            tasks.append(asyncio.ensure_future(stream_once(http, endpoint, key, data, outcome, t0)))

        if with_power:
            for i in range(args.power_requests):
                prompt = f"[#{i}] {POWER_PROMPT}"
                data = body(prompt, args.power_max_tokens, True, marks.get("power"), model)
                launch("power", "power", data)

        async def light(index: int) -> None:
            user = f"light{index + 1}"
            offset = args.light_delay + index * args.light_interval / args.light_users
            k = 0
            while (at := offset + k * args.light_interval) < args.duration:
                await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
                prompt = f"[{user} #{k}] {LIGHT_PROMPT}"
                data = body(prompt, args.light_max_tokens, True, marks.get("light"), model)
                launch(user, "light", data)
                k += 1

        await asyncio.gather(*(light(i) for i in range(args.light_users)))
        done, pending = await asyncio.wait(tasks, timeout=args.duration * 10 + 120)
        for task in pending:
            task.cancel()
        wall = time.monotonic() - t0
    outcomes = [t.result() for t in done]
    return outcomes, wall


async def wait_idle(engine: LlamaServer | VllmServer, timeout: float = 120.0) -> None:
    """Until the engine holds no request (each way starts on an idle engine)."""
    deadline = time.monotonic() + timeout
    while engine.busy():
        if time.monotonic() > deadline:
            raise RuntimeError(f"the engine at {engine.url} never went idle")
        await asyncio.sleep(0.2)


async def run_way(way: str, llama: LlamaServer, args: argparse.Namespace) -> dict[str, Any]:
    await wait_idle(llama)
    if way in ("direct", "ideal"):
        outcomes, wall = await run_load(llama.url, args, None, way == "direct")
        return summarise(way, outcomes, wall)
    tmp = tempfile.TemporaryDirectory(prefix="bench-realengine-")
    db = Database(Path(tmp.name))
    kind = "openai" if way == "openai" else "llamacpp"
    in_flight = str(args.slots) if way == "openai" else "64"
    gw = start_gateway(
        db.url,
        llama.url,
        quiet=True,
        setup=[
            ["add_backend", "simulator", llama.url, "--disabled"],
            ["add_backend", "llama", llama.url, "--kind", kind, "--max-in-flight", in_flight,
             "--model", f"demo-llama:{ALIAS}"],
        ],
    )  # fmt: skip
    try:
        plenty: dict[str, Any] = {"max_concurrent_per_user": 64, "max_queued_per_user": 1000,
                  "queue_timeout_seconds": 3600.0, "preempt_after_ms": None}  # fmt: skip
        if way == "llamacpp-preempt":
            plenty.update(preempt_after_ms=150.0, gate_max_waiting=1, gate_max_tpot_ms=None)
        users = [("power", "interactive", "chat")]
        users += [(f"light{i + 1}", "interactive", "chat") for i in range(args.light_users)]
        keys = configure_gateway(gw, {"interactive": plenty}, users)
        outcomes, wall = await run_load(gw.url, args, keys, True)
    finally:
        gw.stop()
        db.drop()
        tmp.cleanup()
    return summarise(way, outcomes, wall)


def summarise(way: str, outcomes: list[Outcome], wall: float) -> dict[str, Any]:
    out: dict[str, Any] = {"way": way, "wall_s": wall}
    for cls in ("light", "power"):
        mine = [o for o in outcomes if o.cls == cls]
        ttft = [o.ttft for o in mine if o.ttft is not None and o.error is None]
        failed = [o.error for o in mine if o.error is not None]
        out[cls] = {
            "n": len(mine),
            "ttft_p50": percentile(ttft, 50),
            "ttft_p99": percentile(ttft, 99),
            "failed": len(failed),
            "errors": sorted(set(failed))[:3],
            "makespan": max((o.sent + (o.e2e or 0.0) for o in mine), default=None),
        }
    return out


def table(results: list[dict[str, Any]]) -> str:
    rows = [
        "| way | light TTFT p50 | light p99 | light failed | power TTFT p50 | power failed "
        "| power makespan |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        light, power = r["light"], r["power"]
        rows.append(
            f"| {r['way']} | {fmt(light['ttft_p50'])} s | {fmt(light['ttft_p99'])} s "
            f"| {light['failed']}/{light['n']} | {fmt(power['ttft_p50'])} s "
            f"| {power['failed']}/{power['n']} | {fmt(power['makespan'], digits=1)} s |"
        )
    return "\n".join(rows)


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    reason = missing()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    llama = start_llama_server(args.slots)
    try:
        results = [await run_way(way, llama, args) for way in args.ways.split(",")]
    finally:
        llama.stop()
    print(json.dumps(results, indent=2) if args.json else table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
