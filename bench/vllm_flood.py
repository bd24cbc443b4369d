"""The mini flood on the real vLLM: do light users keep their turn in front of vLLM's FIFO?

One vLLM (its CPU build, SmolLM2-135M-Instruct, `--max-num-seqs 4`, installed by `make vllm`)
serves every way in turn, each started when the engine is idle. The load is
bench/realengine_flood.py's: a power user sends `--power-requests` streaming requests at once,
`--light-users` users each send one short streaming request every `--light-interval` s for
`--duration` s, everyone on the interactive tier; with `--whole`, also a weighted heavy pair (the
second on a tier `heavy2` of weight 2) and a batch-tier user (realengine_flood.py's
`gateway_users`), with Jain's index over the pair's tokens per weight.

  direct     straight to vLLM: its first-come-first-served queue
  priority   straight to a vLLM started with `--scheduling-policy priority`, the light users'
             requests marked priority 0 and the power user's 1 (lower goes first): what vLLM's
             own priority mode does when every client marks its requests honestly
  defaults   through the gateway at the product's defaults: backend kind `vllm` (capacity
             blank, learned from the engine's metrics; preemption on), the demo's tiers as they
             ship (interactive: 4 at once and 64 queued per user, a 60 s queue timeout counted
             from the user's last dispatch, the gate's 150 ms time-per-token ceiling, 50 ms
             before a waiting request may pause a stream)
  declared   defaults, but in front of the vLLM started with `--scheduling-policy priority`,
             the backend added with `--priority-scheduling` (product: off, as vLLM's own
             default policy is fcfs), so that the gateway hands each request its coarse
             priority (band, and over or under fair share): what an operator who runs vLLM's
             priority mode declares
  tuned      defaults, changing on the interactive tier what the flood exceeds by design or this
             machine cannot meet: max_concurrent_per_user 64 (demo 4: the power user's 48 are
             sent at once by design), max_queued_per_user 1000 and queue_timeout_seconds 3600
             (demo 64 and 60 s; since the timeout counts only a queue that stopped moving, these
             change nothing here and keep the way comparable with its earlier runs),
             gate_max_tpot_ms blank (demo 150:
             two shared CPU cores may be slower than the ceiling a GPU is held to, and the gate
             would stop all)
  ideal      the light users alone, straight to vLLM

Every gateway way changes, so that only vLLM serves the demo's model: the demo's `simulator`
backend disabled and a backend `vllm` added. Like the tests' gateways (start_gateway), the
gateway runs under the bare daphne command with USAGE_FLUSH_INTERVAL 0.1 s (product 1.0) and
ACCESS_LOG false (product true); none of these is a scheduling setting.

    .venv/bin/python bench/vllm_flood.py            # about 5 minutes on two cores
    .venv/bin/python bench/vllm_flood.py --json
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from loadgen import configure_gateway, gateway_counts
from realengine_flood import (
    MARKS,
    gateway_users,
    parse_args,
    run_load,
    summarise,
    table,
    wait_idle,
)

from llmserver.testing.processes import Database, start_gateway
from llmserver.testing.vllm_server import SERVED_NAME, VllmServer, missing, start_vllm

WAYS = ("direct", "priority", "defaults", "declared", "tuned", "ideal")
# The ways served by the engine started with `--scheduling-policy priority`.
PRIORITY_ENGINE = ("priority", "declared")


async def run_way(way: str, vllm: VllmServer, args: Any) -> dict[str, Any]:
    await wait_idle(vllm)
    if way in ("direct", "priority", "ideal"):
        marks = MARKS if way == "priority" else None
        outcomes, wall, trace = await run_load(
            vllm.url, args, None, way != "ideal", SERVED_NAME, marks, vllm
        )
        return summarise(way, outcomes, wall, args.slots, trace)
    tmp = tempfile.TemporaryDirectory(prefix="bench-vllm-")
    db = Database(Path(tmp.name))
    backend = ["add_backend", "vllm", vllm.url, "--model", f"demo-llama:{SERVED_NAME}"]
    if way == "declared":
        backend.append("--priority-scheduling")
    gw = start_gateway(
        db.url,
        vllm.url,
        quiet=True,
        setup=[["add_backend", "simulator", vllm.url, "--disabled"], backend],
    )
    try:
        tiers: dict[str, dict[str, Any]] = {}
        if way == "tuned":
            tiers["interactive"] = {
                "max_concurrent_per_user": 64,
                "max_queued_per_user": 1000,
                "queue_timeout_seconds": 3600.0,
                "gate_max_tpot_ms": None,
            }
        keys = configure_gateway(gw, *gateway_users(args, tiers))
        outcomes, wall, trace = await run_load(
            gw.url, args, keys, True, engine=vllm, gateway_pid=gw.process.pid
        )
        counts = await gateway_counts(gw.url)
    finally:
        gw.stop()
        db.drop()
        tmp.cleanup()
    return summarise(way, outcomes, wall, args.slots, trace, counts)


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv, WAYS, __doc__)
    reason = missing()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    ways = args.ways.split(",")
    results: dict[str, dict[str, Any]] = {}
    # One engine per scheduling policy, each serving its ways in turn.
    for policy, mine in (
        ("fcfs", [w for w in ways if w not in PRIORITY_ENGINE]),
        ("priority", [w for w in ways if w in PRIORITY_ENGINE]),
    ):
        if not set(mine) & set(ways):
            continue
        vllm = start_vllm(args.slots, options=["--scheduling-policy", policy])
        try:
            for way in (w for w in mine if w in ways):
                results[way] = await run_way(way, vllm, args)
        finally:
            vllm.stop()
    ordered = [results[w] for w in ways]
    print(json.dumps(ordered, indent=2) if args.json else table(ordered))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
