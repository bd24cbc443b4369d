"""Weighted-share benchmark: do backlogged users get service in proportion to their weights, in
each cost unit, without costing the backend throughput?

Three users with different request shapes keep `--outstanding` requests each in flight (closed
loop, non-streamed):

  prompt   a long prompt and a short answer   (on the model "cheap")
  output   a short prompt and a long answer   (on the model "dear")
  medium   a medium prompt and a medium answer (on the model "cheap")

"cheap" and "dear" are two public models on the one simulator (one pool of slots) with different
prices, so in the `money` unit a user on "dear" uses up a share faster. Ways, one after another
against a fresh simulator and gateway:

  fifo                  straight to the simulator: its FIFO queue decides
  <unit> w=1,1,1        through the gateway, the fair-share policy in `unit`, equal weights
  <unit> w=1,2,1        the same with the output user's tier at weight 2

for unit in requests, tokens (w_in 1, w_out 4) and money, at the product's defaults: each
user's tier sets only its weight and per-user limits (the loops hold 24 requests each, above
the default 4 running and 64 queued), the backend is left as the demo makes it (capacity
learned, preemption on), the tiers' gates and preemption as a new tier has them. With
`--tuned`, the ways of earlier runs instead, each change named: the backend's capacity set
(`--max-num-seqs`: exact slots from the first request, not once learned), the tiers'
`gate_max_waiting` from `--gate-max-waiting` (how much the engine may queue), no TPOT ceiling
(the simulator's TPOT is what it is) and preemption off (`preempt_after_ms` blank: fair share
from dispatch order alone).

Each way measures for `--duration`
seconds after `--warmup`. Reported: each user's service in the way's unit (requests completed;
prompt + 4 x completion tokens; their price), its share of the total, Jain's index over
share / weight (1.0 is exactly proportional), the simulator's generated tokens/s against
FIFO's, and how full the way kept the engine's batch (its running count, sampled every 100 ms,
over --max-num-seqs). FIFO's Jain is shown in every unit for contrast. Generated tokens/s
depends on the mix as well as on the engine's use: a way that serves the long-answer user less
(as `money` must, that user being dear) generates fewer tokens from a batch just as full.

    .venv/bin/python bench/weighted_share.py                 # about 4 minutes
    .venv/bin/python bench/weighted_share.py --duration 10 --json
    .venv/bin/python bench/weighted_share.py --tuned
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from dataclasses import dataclass, field
from typing import Any

from loadgen import client, configure_gateway, counters, fmt, generated_tokens, jain, stage

UPSTREAM = "demo-llama"
PRICES = {"cheap": (1.0, 2.0), "dear": (4.0, 16.0)}  # per million tokens: input, output
OUTPUT_WEIGHT = 4.0
UNITS = ("requests", "tokens", "money")
WEIGHTS = ((1.0, 1.0, 1.0), (1.0, 2.0, 1.0))


@dataclass(frozen=True)
class Shape:
    user: str
    model: str
    prompt_words: int
    max_tokens: int


SHAPES = (
    Shape("prompt", "cheap", 1200, 16),
    Shape("output", "dear", 20, 256),
    Shape("medium", "cheap", 300, 64),
)


@dataclass
class Served:
    """What one user got inside the measuring window: (prompt, completion) per request."""

    done: list[tuple[int, int]] = field(default_factory=list)
    errors: int = 0
    completed: int = 0  # over the whole run, warm-up included (evictions are counted so too)

    def service(self, unit: str, model: str) -> float:
        if unit == "requests":
            return float(len(self.done))
        if unit == "tokens":
            return sum(p + OUTPUT_WEIGHT * c for p, c in self.done)
        price_in, price_out = PRICES[model]
        return sum(p * price_in + c * price_out for p, c in self.done) / 1_000_000


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=20.0, help="Measured seconds per way.")
    p.add_argument("--warmup", type=float, default=4.0)
    p.add_argument("--outstanding", type=int, default=24, help="Requests in flight per user.")
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--speed", type=float, default=4.0, help="The simulator's speed factor.")
    p.add_argument("--units", default=",".join(UNITS))
    p.add_argument(
        "--gate-max-waiting",
        type=int,
        default=1,
        help="With --tuned: how many requests the gateway lets wait inside the engine.",
    )
    p.add_argument(
        "--tuned",
        action="store_true",
        help="Capacity set, the gate from --gate-max-waiting, no TPOT ceiling, preemption off.",
    )
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


def request(shape: Shape, model: str | None = None) -> dict[str, Any]:
    return {
        "model": model or shape.model,
        "messages": [{"role": "user", "content": "word " * shape.prompt_words}],
        "max_tokens": shape.max_tokens,
    }


async def keep_busy(
    http: Any,
    url: str,
    key: str | None,
    shape: Shape,
    model: str | None,
    window: tuple[float, float],
    served: Served,
) -> None:
    """One of a user's `outstanding` loops: send, and on the answer send again, until the end."""
    headers = {"authorization": f"Bearer {key}"} if key else {}
    data = request(shape, model)
    while time.monotonic() < window[1]:
        response = await http.post(url, json=data, headers=headers)
        finished = time.monotonic()
        if response.status_code != 200:
            served.errors += 1
            await asyncio.sleep(0.05)
            continue
        served.completed += 1
        usage = response.json()["usage"]
        if window[0] <= finished <= window[1]:
            served.done.append((usage["prompt_tokens"], usage["completion_tokens"]))


async def run_load(
    base: str, sim_url: str, keys: dict[str, str] | None, direct: bool, args: argparse.Namespace
) -> dict[str, Any]:
    url = base + "/v1/chat/completions"
    served = {s.user: Served() for s in SHAPES}
    async with client() as http:
        start = time.monotonic()
        window = (start + args.warmup, start + args.warmup + args.duration)
        loops = [
            keep_busy(
                http,
                url,
                keys[s.user] if keys else None,
                s,
                UPSTREAM if direct else None,
                window,
                served[s.user],
            )
            for s in SHAPES
            for _ in range(args.outstanding)
        ]
        tasks = [asyncio.ensure_future(loop) for loop in loops]
        await asyncio.sleep(window[0] - time.monotonic())
        before = generated_tokens(await counters(http, sim_url))
        running = await sample_running(http, sim_url, window[1])
        after = generated_tokens(await counters(http, sim_url))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return {
        "served": served,
        "tokens_per_second": (after - before) / args.duration,
        "occupancy": sum(running) / len(running) / args.max_num_seqs if running else 0.0,
    }


async def sample_running(http: Any, sim_url: str, until: float) -> list[float]:
    """The batch's size every 100 ms: how full the way kept the engine, whatever the mix."""
    running = []
    while time.monotonic() < until:
        running.append((await counters(http, sim_url)).get("vllm:num_requests_running", 0.0))
        await asyncio.sleep(min(0.1, max(0.0, until - time.monotonic())))
    return running


def measure(served: dict[str, Served], unit: str, weights: tuple[float, ...]) -> dict[str, Any]:
    service = [served[s.user].service(unit, s.model) for s in SHAPES]
    total = sum(service) or 1.0
    shares = [x / total for x in service]
    return {
        "shares": dict(zip([s.user for s in SHAPES], shares, strict=True)),
        "jain": jain([x / w for x, w in zip(shares, weights, strict=True)]),
        "errors": sum(served[s.user].errors for s in SHAPES),
    }


def gateway_spec(unit: str, weights: tuple[float, ...], args: argparse.Namespace) -> dict[str, Any]:
    tiers: dict[str, Any] = {}
    keys = []
    for shape, weight in zip(SHAPES, weights, strict=True):
        tier = f"share-{shape.user}"
        tiers[tier] = {
            "weight": weight,
            "max_concurrent_per_user": 64,
            "max_queued_per_user": 1000,
            "queue_timeout_seconds": 600.0,
        }
        if args.tuned:
            tiers[tier] |= {
                "gate_max_waiting": args.gate_max_waiting,
                "gate_max_tpot_ms": None,
                "preempt_after_ms": None,
            }
        keys.append((shape.user, tier, "chat"))
    return {
        "tiers": tiers,
        "keys": keys,
        "routes": {model: {"backend": "simulator", "upstream_model": UPSTREAM} for model in PRICES},
        "prices": {model: list(price) for model, price in PRICES.items()},
        "policy": {"unit": unit, "input_weight": 1.0, "output_weight": OUTPUT_WEIGHT},
    }


async def run_way(
    unit: str | None, weights: tuple[float, ...], args: argparse.Namespace
) -> dict[str, Any]:
    with stage(UPSTREAM, args.max_num_seqs, args.speed) as way:
        if unit is None:
            return await run_load(way.sim.url, way.sim.url, None, True, args)
        gw = way.gateway({"SCHEDULER_COST_UNIT": unit})
        spec = gateway_spec(unit, weights, args)
        backends = {"simulator": {"capacity": args.max_num_seqs}} if args.tuned else {}
        keys = configure_gateway(gw, spec["tiers"], spec["keys"], backends, extra=spec)
        run = await run_load(gw.url, way.sim.url, keys, False, args)
        async with client() as http:
            values = await counters(http, gw.url)
        run["evictions"] = sum(
            v for k, v in values.items() if k.startswith("llmserver_preemptions_total")
        )
        return run


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    units = [u for u in args.units.split(",") if u]
    print("running fifo ...", file=sys.stderr)
    fifo = await run_way(None, WEIGHTS[0], args)
    rows = []
    for unit in units:
        for weights in WEIGHTS:
            print(f"running {unit} w={weights} ...", file=sys.stderr)
            run = await run_way(unit, weights, args)
            rows.append(
                {
                    "unit": unit,
                    "weights": weights,
                    "gateway": measure(run["served"], unit, weights),
                    "fifo": measure(fifo["served"], unit, weights),
                    "tokens_per_second": run["tokens_per_second"],
                    "vs_fifo": run["tokens_per_second"] / fifo["tokens_per_second"],
                    "occupancy": run["occupancy"],
                    "evictions_per_completed": run["evictions"]
                    / max(1, sum(x.completed for x in run["served"].values())),
                }
            )
    if args.json:
        print(
            json.dumps(
                {"fifo": {k: fifo[k] for k in ("tokens_per_second", "occupancy")}, "rows": rows}
            )
        )
    else:
        print(table(rows, fifo))
    return 0


def table(rows: list[dict[str, Any]], fifo: dict[str, Any]) -> str:
    users = [s.user for s in SHAPES]
    lines = [
        "| unit | weights | shares through the gateway ("
        + " / ".join(users)
        + ") | Jain (share/weight) | FIFO's Jain | tokens/s | vs FIFO | batch full "
        + "| evictions per completed | errors |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        g, f = r["gateway"], r["fifo"]
        shares = " / ".join(fmt(g["shares"][u], 100, 1) + "%" for u in users)
        lines.append(
            f"| {r['unit']} | {','.join(f'{w:g}' for w in r['weights'])} | {shares} "
            f"| {fmt(g['jain'], 1, 3)} | {fmt(f['jain'], 1, 3)} "
            f"| {fmt(r['tokens_per_second'], 1, 0)} | {fmt(r['vs_fifo'], 100, 1)}% "
            f"| {fmt(r['occupancy'], 100, 1)}% | {fmt(r['evictions_per_completed'], 1, 3)} "
            f"| {g['errors']} |"
        )
    met = [
        r
        for r in rows
        if (r["gateway"]["jain"] or 0) >= 0.99
        and r["vs_fifo"] >= 0.98
        and r["evictions_per_completed"] <= 0.05
    ]
    lines.append("")
    lines.append(
        f"FIFO: {fifo['tokens_per_second']:.0f} tokens/s, batch "
        f"{fifo['occupancy'] * 100:.1f}% full. Targets (Jain >= 0.99, tokens/s >= 98% of FIFO's, "
        "at most 0.05 evictions per completed request) "
        f"met in {len(met)} of {len(rows)} ways."
    )
    return "\n".join(lines)


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
