"""Endpoint-mix benchmark: do users of different APIs share one backend fairly?

Four users keep `--outstanding` requests each in flight (closed loop, non-streamed) against one
simulator, each through a different endpoint:

  chat       POST /v1/chat/completions   a medium prompt, a medium answer   (demo-llama)
  embedder   POST /v1/embeddings         8 inputs of a medium text each     (demo-embed)
  agent      POST /v1/responses          a medium input, a long answer      (demo-llama)
  coder      POST /v1/messages           a long prompt, a short answer      (demo-llama)

Ways, one after another against a fresh simulator:

  fifo       straight to the simulator: its FIFO queue decides
  gateway    through the gateway at the product's defaults: `make run`'s demo as it is (the
             four users on the demo's interactive tier, weight 1, its limits, gates and
             preemption; demo-embed is the demo's embeddings route on the same simulator), the
             fair-share unit `tokens` (prompt + 4 x completion) as a new install has it.

Reported per way: each user's service in tokens (prompt + 4 x completion of the requests that
ended inside the measuring window), its share, and Jain's index over the shares (1.0: equal),
the simulator's generated tokens/s against FIFO's, and errors.

    .venv/bin/python bench/endpoint_mix.py                 # about 1 minute
    .venv/bin/python bench/endpoint_mix.py --duration 10 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from loadgen import client, configure_gateway, counters, fmt, generated_tokens, jain, stage

MODEL, EMBEDDER = "demo-llama", "demo-embed"
OUTPUT_WEIGHT = 4.0
TEXT = "word "


def usage_of(kind: str) -> Callable[[dict[str, Any]], tuple[int, int]]:
    """(prompt, completion) tokens from an answer of the endpoint `kind`."""
    if kind in ("chat", "embeddings"):
        return lambda u: (u["prompt_tokens"], u.get("completion_tokens", 0))
    return lambda u: (u["input_tokens"], u["output_tokens"])


@dataclass(frozen=True)
class User:
    name: str
    path: str
    body: dict[str, Any]
    kind: str


USERS = (
    User(
        "chat",
        "/v1/chat/completions",
        {"model": MODEL, "messages": [{"role": "user", "content": TEXT * 300}], "max_tokens": 64},
        "chat",
    ),
    User(
        "embedder", "/v1/embeddings", {"model": EMBEDDER, "input": [TEXT * 150] * 8}, "embeddings"
    ),
    User(
        "agent",
        "/v1/responses",
        {"model": MODEL, "input": TEXT * 300, "max_output_tokens": 192},
        "responses",
    ),
    User(
        "coder",
        "/v1/messages",
        {"model": MODEL, "max_tokens": 16, "messages": [{"role": "user", "content": TEXT * 1200}]},
        "messages",
    ),
)


@dataclass
class Served:
    done: list[tuple[int, int]] = field(default_factory=list)
    errors: int = 0

    def tokens(self) -> float:
        return sum(p + OUTPUT_WEIGHT * c for p, c in self.done)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float, default=20.0, help="Measured seconds per way.")
    p.add_argument("--warmup", type=float, default=4.0)
    p.add_argument("--outstanding", type=int, default=16, help="Requests in flight per user.")
    p.add_argument("--max-num-seqs", type=int, default=8)
    p.add_argument("--speed", type=float, default=4.0, help="The simulator's speed factor.")
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


async def keep_busy(
    http: Any, base: str, key: str | None, user: User, window: tuple[float, float], served: Served
) -> None:
    headers = {"authorization": f"Bearer {key}"} if key else {}
    read = usage_of(user.kind)
    while time.monotonic() < window[1]:
        response = await http.post(base + user.path, json=user.body, headers=headers)
        finished = time.monotonic()
        if response.status_code != 200:
            served.errors += 1
            await asyncio.sleep(0.05)
            continue
        if window[0] <= finished <= window[1]:
            served.done.append(read(response.json()["usage"]))


async def run_load(
    base: str, sim_url: str, keys: dict[str, str] | None, args: argparse.Namespace
) -> dict[str, Any]:
    served = {u.name: Served() for u in USERS}
    async with client() as http:
        start = time.monotonic()
        window = (start + args.warmup, start + args.warmup + args.duration)
        tasks = [
            asyncio.ensure_future(
                keep_busy(http, base, keys[u.name] if keys else None, u, window, served[u.name])
            )
            for u in USERS
            for _ in range(args.outstanding)
        ]
        await asyncio.sleep(window[0] - time.monotonic())
        before = generated_tokens(await counters(http, sim_url))
        await asyncio.sleep(window[1] - time.monotonic())
        after = generated_tokens(await counters(http, sim_url))
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    service = {name: s.tokens() for name, s in served.items()}
    total = sum(service.values()) or 1.0
    shares = {name: x / total for name, x in service.items()}
    return {
        "shares": shares,
        "requests": {name: len(s.done) for name, s in served.items()},
        "jain": jain(list(shares.values())),
        "errors": sum(s.errors for s in served.values()),
        "tokens_per_second": (after - before) / args.duration,
    }


async def run_way(through_gateway: bool, args: argparse.Namespace) -> dict[str, Any]:
    with stage(MODEL, args.max_num_seqs, args.speed) as way:
        if not through_gateway:
            return await run_load(way.sim.url, way.sim.url, None, args)
        gw = way.gateway()
        keys = configure_gateway(gw, {}, [(u.name, "interactive", "chat") for u in USERS])
        return await run_load(gw.url, way.sim.url, keys, args)


def table(ways: dict[str, dict[str, Any]]) -> str:
    names = [u.name for u in USERS]
    fifo = ways["fifo"]["tokens_per_second"]
    lines = [
        "| way | token shares (" + " / ".join(names) + ") | requests | Jain | tokens/s "
        "| vs FIFO | errors |",
        "|---|---|---|---|---|---|---|",
    ]
    for way, r in ways.items():
        shares = " / ".join(fmt(r["shares"][n], 100, 1) + "%" for n in names)
        requests = " / ".join(str(r["requests"][n]) for n in names)
        lines.append(
            f"| {way} | {shares} | {requests} | {fmt(r['jain'], 1, 3)} "
            f"| {fmt(r['tokens_per_second'], 1, 0)} | {fmt(r['tokens_per_second'] / fifo, 100, 1)}% "
            f"| {r['errors']} |"
        )
    return "\n".join(lines)


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    ways = {}
    for way in ("fifo", "gateway"):
        print(f"running {way} ...", file=sys.stderr)
        ways[way] = await run_way(way == "gateway", args)
    print(json.dumps(ways) if args.json else table(ways))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
