"""Prefix-aware routing benchmark: does sending a prompt where its prefix is cached pay off on a
pool of four backends, without piling onto one and without bending fair share?

One invocation runs the same closed-loop workload four ways, each against four fresh simulators
(vLLM-like: continuous batching, `--max-num-seqs` running, prefill charged per uncached prompt
token, an LRU prefix cache of `--cache-blocks` 16-token blocks):

  round-robin   backends in turn
  least-load    the least loaded backend (the gateway's fallback; prefix worth 0 slots)
  prefix        prefix-aware: a fully cached prompt is worth `--affinity` slots of load
  prefix+batch  the same, plus batching similar queued jobs within `--batch-slack`

The scheduler is the gateway's own (`scheduling.SchedulerService`, exact slots: capacity =
max_in_flight = max_num_seqs, so the gateway holds the queue), and each request's prefix blocks
come from the gateway's own validation; the requests stream from the simulators over HTTP. The
gateway's HTTP front is not in the loop (its routing decision is this code).

`--ways` may add two more, for KV cache events (`docs/BACKENDS.md`): two independent gateways
(two schedulers, each with half of every backend's slots, requests alternating between them as
a load balancer would send them, neither seeing the other's routing):

  two-gateways         prefix-aware, each gateway knowing only what it routed itself
  two-gateways+events  the same, each also subscribed to all four backends' KV events, prompts
                       keyed by token blocks as the gateway keys them (a chat's shared start
                       from a backend's /tokenize once, then from memory; round trips counted)

No way runs at the product's defaults: the scheduler runs in this process, without the
gateway's metrics poller or relay, and each way sets the routing setting it measures. Every way
changes:

  capacity = max_in_flight = `--max-num-seqs` (8) per backend (half of it per gateway in the
      two-gateway ways), no metrics read, so no band gate (product: capacity learned,
      max_in_flight 64, the tier's gate on the metrics): the gateway, not a backend's own
      queue, holds every waiting job, so where a job waits is the routing decision measured
  preemption off, for backends and jobs (product: on, after 150 ms): this loop streams the
      answers itself and cannot pause and continue one, as the gateway's relay does
  per-user limits 10,000 running and queued, no queue timeout: the open-loop load exceeds 4
      running and 64 queued by design, and a run (8 s, then at most 15 s of drain) is shorter
      than any tier's timeout
  prefix_index_blocks 1,120 per backend (product 8192): a simulator's cache (640 blocks of 16
      tokens of about 7 characters) in 64-character gateway blocks, the size the setting is
      meant to match

Left as the product has them: everyone on the interactive band at weight 1 (the demo's
interactive tier), costs in tokens (w_in 1, w_out 4), first come first served within a user;
`validate`'s max_tokens settings change nothing, as every request asks for `--max-tokens`.
Each way then changes:

  round-robin   the gateway's backend choice, replaced (no setting does this): the baseline
                that ignores both prefix and load
  least-load    affinity_slack 0 (product 2): a cached prefix is worth nothing, the gateway's
                choice without prefix routing
  prefix        affinity_slack `--affinity` 8 (product 2): a job waits for the busy backend
                holding its prefix rather than spill to a cold one; with 2 (`--affinity 2`)
                more spill (hit rates 0.59-0.73 against 0.96-0.98, docs/BENCHMARKS.md)
  prefix+batch  as prefix, and batch_slack `--batch-slack` 8,000 tokens (product 0: batching
                off): batching is what this way adds
  two-gateways  as prefix, on two gateways that share nothing, each given half of every
                backend's slots: the deployment KV events are for
  two-gateways+events  as two-gateways, and each backend's kv_events_endpoint set (product
                blank), prompts keyed by token blocks: the events are what it measures

The load: `--tenants` tenants, each with its own system prompt of `--system-tokens` words;
`--clients` users per tenant; requests arrive open loop (Poisson, `--rate` per second, the
same seeded sequence for every way), each from a user picked at random, with a short new
question; one user in three holds a conversation of up to four turns (its earlier turns are the
prefix of the next). The default rate is above what the pool serves when every backend sees
every tenant (its cache then thrashes), and below what it serves with the prefixes kept apart:
the TTFT ratio measures exactly that difference in capacity, and grows with the offered rate.
Measured after `--warmup`: TTFT p50/p99 (submission to the first text chunk, queue included),
completed requests/s, the prefix-cache hit rate of each backend (its
`vllm:prefix_cache_hits` / `vllm:prefix_cache_queries`), load balance (max / mean requests per
backend) and Jain's index over the tenants' completed requests.

    .venv/bin/python bench/prefix_routing.py            # about one minute
    .venv/bin/python bench/prefix_routing.py --json
    .venv/bin/python bench/prefix_routing.py --ways prefix,two-gateways,two-gateways+events
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import random
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import django
import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmserver.settings")
os.environ.setdefault("SECRET_KEY", "bench")
django.setup()

from loadgen import client, counters, has_text, percentile  # noqa: E402

import scheduling.core  # noqa: E402
from llmserver.backends.kv_events import KvEventSubscriber  # noqa: E402
from llmserver.backends.prompt_tokens import (  # noqa: E402
    SharedStarts,
    shared_start_key,
    tokenize_request,
)
from llmserver.wire.validation import TokenLimits, validate  # noqa: E402
from scheduling import (  # noqa: E402
    BackendConfig,
    BackendState,
    Job,
    Principal,
    SchedulerConfig,
    SchedulerService,
    TierPolicy,
)
from scheduling.prefix_index import PrefixIndex  # noqa: E402
from simulator.launcher import RunningSimulator, start_simulator  # noqa: E402

MODEL = "demo-llama"
WAYS = ("round-robin", "least-load", "prefix", "prefix+batch")
EXTRA_WAYS = ("two-gateways", "two-gateways+events")


@dataclass
class Result:
    way: str
    ttft: list[float] = field(default_factory=list)
    completed: int = 0
    errors: int = 0
    elapsed: float = 0.0
    per_backend: Counter[str] = field(default_factory=Counter)
    per_tenant: Counter[str] = field(default_factory=Counter)
    hit_rate: dict[str, float] = field(default_factory=dict)
    batched: int = 0
    unfinished: int = 0

    def summary(self) -> dict[str, Any]:
        loads = list(self.per_backend.values()) or [0]
        shares = list(self.per_tenant.values()) or [0]
        mean = sum(loads) / len(loads)
        return {
            "way": self.way,
            "ttft_p50": percentile(self.ttft, 50),
            "ttft_p99": percentile(self.ttft, 99),
            "throughput": self.completed / self.elapsed if self.elapsed else 0.0,
            "completed": self.completed,
            "errors": self.errors,
            "hit_rate": self.hit_rate,
            "balance": max(loads) / mean if mean else 0.0,
            "jain": jain(shares),
            "batched": self.batched,
            "unfinished": self.unfinished,
        }


def jain(xs: Sequence[float]) -> float:
    """Jain's fairness index: 1 when all equal, 1/n when one has everything."""
    total = sum(xs)
    squares = sum(x * x for x in xs)
    return total * total / (len(xs) * squares) if squares else 0.0


def system_prompt(tenant: int, words: int) -> str:
    rng = random.Random(tenant)
    vocab = [f"t{tenant}w{i}" for i in range(400)]
    return " ".join(rng.choice(vocab) for _ in range(words))


@dataclass
class User:
    """One user of a tenant; one in three holds conversations of up to four turns."""

    principal: Principal
    system: str
    conversational: bool
    rng: random.Random
    history: list[dict[str, str]] = field(default_factory=list)
    busy: bool = False
    sent: int = 0

    def messages(self) -> list[dict[str, str]]:
        """The next request: the tenant's system prompt, the conversation so far (a user still
        waiting for an answer, or at the end of a four-turn conversation, starts afresh), and
        a short new question."""
        if self.busy or not self.conversational or self.sent % 4 == 0:
            self.history = []
        question = " ".join(f"q{self.rng.randrange(10_000)}" for _ in range(12))
        self.sent += 1
        return [
            {"role": "system", "content": self.system},
            *self.history,
            {"role": "user", "content": question},
        ]


def round_robin() -> Any:
    """A stand-in for `choose_backend` that ignores prefixes and load: backends in turn."""
    order = itertools.count()

    def choose(
        index: PrefixIndex, blocks: Any, open_backends: Sequence[BackendState], *_: Any
    ) -> BackendState:
        return sorted(open_backends, key=lambda s: s.name)[next(order) % len(open_backends)]

    return choose


async def token_blocks(
    http: httpx.AsyncClient, url: str, body: dict[str, Any], starts: SharedStarts
) -> tuple[int, ...]:
    """As the gateway keys a prompt for a pool publishing KV events (`Gateway.token_blocks`):
    the chat's shared start from memory, else from the backend's /tokenize."""
    key = shared_start_key(MODEL, "chat", body)
    if key is not None and (known := starts.get(key)) is not None:
        return known
    request = tokenize_request("chat", MODEL, body, shared=key is not None)
    response = await http.post(url + "/tokenize", json=request)
    return starts.learn(key, response.json()["tokens"])


async def one_request(
    services: Sequence[SchedulerService],
    http: httpx.AsyncClient,
    urls: dict[str, str],
    user: User,
    n: int,
    args: argparse.Namespace,
    result: Result,
    window: tuple[float, float],
    starts: list[SharedStarts] | None,
) -> None:
    messages = user.messages()
    data = {"model": MODEL, "messages": messages, "max_tokens": args.max_tokens, "stream": True}
    service = services[n % len(services)]  # a load balancer's turns
    sent = time.monotonic()
    req = validate("chat", data, TokenLimits(16, 4096))
    if starts is not None:  # each gateway remembers the starts it tokenized
        names = sorted(urls)
        url = urls[names[n % len(names)]]
        req.prefix_blocks = await token_blocks(http, url, data, starts[n % len(services)])
    job = Job(
        id=f"r{n}",
        principal=user.principal,
        model=MODEL,
        band=0,
        estimated_cost=req.estimated_prompt_tokens + 4.0 * req.max_tokens,
        estimated_output_tokens=req.max_tokens,
        prefix_blocks=req.prefix_blocks,
        policy=TierPolicy(max_queued=10_000, max_concurrent=10_000),
    )
    user.busy = True
    ticket = service.submit(job)
    backend = await ticket.dispatched()
    ttft, answer = None, []
    try:
        url = urls[backend] + "/v1/chat/completions"
        async with http.stream("POST", url, json=req.body) as response:
            async for line in response.aiter_lines():
                if line.startswith("data: {") and has_text(line):
                    ttft = ttft or time.monotonic() - sent
                    delta = json.loads(line[6:])["choices"][0]["delta"]
                    answer.append(delta.get("content") or "")
    except httpx.HTTPError:
        result.errors += 1
    finally:
        service.complete(ticket)
        user.busy = False
    if user.conversational:
        user.history = [*messages[1:], {"role": "assistant", "content": "".join(answer)}]
    start, stop = window
    if start <= sent < stop and ttft is not None:
        result.ttft.append(ttft)
    if start <= time.monotonic() < stop:
        result.completed += 1
        result.per_backend[backend] += 1
        result.per_tenant[user.principal.tenant] += 1


async def offer_load(
    services: Sequence[SchedulerService],
    http: httpx.AsyncClient,
    urls: dict[str, str],
    args: argparse.Namespace,
    result: Result,
    tokenized: bool,
) -> None:
    """Poisson arrivals at `--rate` per second for `--duration` seconds, from users picked at
    random; then wait (bounded) for what is in flight."""
    rng = random.Random(args.seed)
    users = [
        User(
            Principal(f"tenant{t}", f"user{c}"),
            system_prompt(t, args.system_tokens),
            c % 3 == 0,
            random.Random(args.seed * 1000 + t * 100 + c),
        )
        for t in range(args.tenants)
        for c in range(args.clients)
    ]
    starts = [SharedStarts() for _ in services] if tokenized else None
    start = time.monotonic()
    window = (start + args.warmup, start + args.duration)
    tasks = []
    for n in itertools.count():
        now = time.monotonic()
        if now >= window[1]:
            break
        user = rng.choice(users)
        tasks.append(
            asyncio.create_task(
                one_request(services, http, urls, user, n, args, result, window, starts)
            )
        )
        await asyncio.sleep(rng.expovariate(args.rate))
    # Bounded: a scheduler failure or a hopeless backlog must end the run, not hang it.
    _, pending = await asyncio.wait(tasks, timeout=args.drain)
    for task in pending:
        task.cancel()
    result.unfinished = len(pending)
    result.elapsed = args.duration - args.warmup


async def run_way(way: str, args: argparse.Namespace) -> Result:
    gateways = 2 if way.startswith("two-gateways") else 1
    events = way.endswith("+events")
    sim_args = [
        "--model",
        MODEL,
        "--max-num-seqs",
        str(args.max_num_seqs),
        "--prefix-cache-blocks",
        str(args.cache_blocks),
        "--speed",
        str(args.speed),
    ]
    sims: dict[str, RunningSimulator] = {}
    endpoints: dict[str, str] = {}
    listening: list[asyncio.Task[None]] = []
    original = scheduling.core.choose_backend
    # Each gateway subscribes to every backend, so the simulators bind: an ipc endpoint, which
    # vLLM binds as it does a wildcard (a loopback tcp endpoint it would connect to).
    sockets = tempfile.TemporaryDirectory(prefix="kv-events-")
    try:
        for i in range(4):
            extra: list[str] = []
            if events:
                endpoints[f"b{i}"] = endpoint = f"ipc://{sockets.name}/b{i}"
                config = {"enable_kv_cache_events": True, "endpoint": endpoint}
                extra = ["--kv-events-config", json.dumps(config)]
            sims[f"b{i}"] = start_simulator(*sim_args, *extra)
        config = SchedulerConfig(
            gates={},
            affinity_slack=0 if way == "least-load" else args.affinity,
            # The backend's cache in gateway blocks (64 characters; a simulator token is a
            # word of about 6 characters plus a space).
            prefix_index_blocks=args.cache_blocks * 16 * 7 // 64,
            batch_slack=args.batch_slack if way == "prefix+batch" else 0.0,
        )
        slots = args.max_num_seqs // gateways  # each gateway is given its share of every backend
        backends = [
            BackendConfig(
                name, frozenset({MODEL}), max_in_flight=slots, has_metrics=False, capacity=slots
            )
            for name in sims
        ]
        services = [SchedulerService(config, backends) for _ in range(gateways)]
        if way == "round-robin":
            scheduling.core.choose_backend = round_robin()  # type: ignore[assignment]
        for service in services:
            await service.start()
            for name, endpoint in endpoints.items():
                sub = KvEventSubscriber(name, endpoint, service.cache_events)
                listening.append(asyncio.create_task(sub.run()))
        result = Result(way)
        urls = {name: sim.url for name, sim in sims.items()}
        async with client() as http:
            await offer_load(services, http, urls, args, result, events)
            for name, sim in sims.items():
                values = await counters(http, sim.url)
                queries = values.get("vllm:prefix_cache_queries_total", 0.0)
                hits = values.get("vllm:prefix_cache_hits_total", 0.0)
                result.hit_rate[name] = hits / queries if queries else 0.0
        result.batched = sum(service.core.batched for service in services)
        for service in services:
            await service.stop()
        return result
    finally:
        for task in listening:
            task.cancel()
        scheduling.core.choose_backend = original
        for sim in sims.values():
            sim.stop()
        sockets.cleanup()


def fmt(v: float | None, scale: float = 1.0, digits: int = 0) -> str:
    return "-" if v is None else f"{v * scale:.{digits}f}"


def report(results: list[dict[str, Any]]) -> str:
    base = next((r for r in results if r["way"] == "least-load"), results[0])
    lines = [
        f"| way | TTFT p50 ms | TTFT p99 ms | req/s | vs {base['way']}: p50 / req/s "
        "| hit rate per backend | max/mean load | Jain |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in results:
        ratio_p50 = base["ttft_p50"] / r["ttft_p50"] if r["ttft_p50"] else None
        ratio_tp = r["throughput"] / base["throughput"] if base["throughput"] else None
        hits = " ".join(f"{v:.2f}" for v in r["hit_rate"].values())
        lines.append(
            f"| {r['way']} | {fmt(r['ttft_p50'], 1000)} | {fmt(r['ttft_p99'], 1000)} "
            f"| {r['throughput']:.1f} | {fmt(ratio_p50, digits=2)}x / {fmt(ratio_tp, digits=2)}x "
            f"| {hits} | {r['balance']:.2f} | {r['jain']:.3f} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tenants", type=int, default=8)
    parser.add_argument("--clients", type=int, default=6, help="users per tenant")
    parser.add_argument("--rate", type=float, default=90.0, help="requests per second offered")
    parser.add_argument("--drain", type=float, default=15.0, help="seconds to finish, at most")
    parser.add_argument("--system-tokens", type=int, default=3000)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--max-num-seqs", type=int, default=8)
    parser.add_argument("--cache-blocks", type=int, default=640, help="per backend, 16 tokens")
    parser.add_argument("--speed", type=float, default=2.0)
    parser.add_argument("--duration", type=float, default=8.0, help="seconds per way")
    parser.add_argument("--warmup", type=float, default=2.0, help="not measured")
    parser.add_argument("--affinity", type=int, default=8, help="slots a cached prefix is worth")
    parser.add_argument("--batch-slack", type=float, default=8000.0, help="in tokens")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--ways", default=",".join(WAYS), help=f"any of {', '.join(WAYS + EXTRA_WAYS)}"
    )
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args(argv)
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    unknown = set(ways) - set(WAYS + EXTRA_WAYS)
    if unknown:
        parser.error(f"unknown ways: {', '.join(sorted(unknown))}")
    results = [asyncio.run(run_way(way, args)).summary() for way in ways]
    print(json.dumps(results, indent=2) if args.json else report(results))


if __name__ == "__main__":
    main()
