"""The mini flood on a real engine: do light users keep their turn in front of llama-server?

One llama.cpp `llama-server` (Gemma 3 270M Q4_K_M, `-np 4 --metrics`, built by
`make realengine`) serves every way in turn, each started when the engine is idle:

  direct     straight to llama-server: its FIFO of deferred tasks
  defaults   through the gateway at the product's defaults: backend kind `llamacpp` (capacity
             blank, read from /props; preemption on, max_in_flight 64), the demo's tiers as
             they ship (interactive: 4 at once and 64 queued per user, a 60 s queue timeout
             counted from the user's last dispatch, the gate's 150 ms time-per-token ceiling,
             50 ms before a waiting request may pause a stream)
  llamacpp   through the gateway, backend kind `llamacpp`: the gate reads the engine's metrics
             (requests_deferred against the interactive tier's gate_max_waiting)
  openai     through the gateway, backend kind `openai` with max_in_flight 4: no metrics,
             a concurrency cap equal to the engine's slots (how an operator tried it first)
  llamacpp-preempt  kind `llamacpp` with its capacity read from /props, the interactive gate
             keeping llama-server's own queue empty (gate_max_waiting 1, no TPOT ceiling) and
             preemption: a light request waiting 150 ms pauses a power stream, continued later
The first three run with preemption off (the tier's preempt_after_ms blank).
  ideal      the light users alone, straight to llama-server

Every gateway way changes the demo's `simulator` backend to disabled and adds a backend `llama`
(capacity blank, preemption on, max_in_flight 64 unless said below), so that only llama-server
serves the demo's model. Past `defaults`, each way also changes on the demo's interactive tier
max_concurrent_per_user 64, max_queued_per_user 1000 and queue_timeout_seconds 3600 (demo 4,
64 and 60 s), as the power user's 48 requests at once exceed the limits by design and on a slow
engine its last ones have waited over a minute (docs/BENCHMARKS.md), and then:

  llamacpp   preempt_after_ms blank (default 50): the gate alone is measured, as in the first
             run, before preemption existed. Its gates are the demo's, but with the backend's
             preemption on and its capacity read from /props the gateway keeps llama-server's
             own queue empty whatever gate_max_waiting says (`scheduling/gate.py`)
  openai     kind `openai` (no metrics read: no gate, no capacity), max_in_flight 4 (`--slots`;
             product 64) and preempt_after_ms blank: a concurrency cap alone, as an operator
             first tried it
  llamacpp-preempt  preempt_after_ms 150 (default 50: the figures of issue 18); gate_max_waiting 1 (demo 3): a request
             queued inside the engine is one a light user waits behind; gate_max_tpot_ms blank
             (demo 150), for the reason above

Like the tests' gateways (start_gateway), every gateway way runs under the bare daphne command
rather than rungateway, with USAGE_FLUSH_INTERVAL 0.1 s (product 1.0) and ACCESS_LOG false
(product true); none of these is a scheduling setting.

The load: a power user sends `--power-requests` streaming requests at once; `--light-users`
users each send one short streaming request every `--light-interval` s for `--duration` s. All
users are on the interactive tier, so the gateway's fair share (not band priority) is measured.
Reported: light and power time to first token (p50/p99), failures, power makespan, and from
the engine's own metrics (`EngineTrace`) its slots busy, the prompt tokens it computed and its
mean gap between two tokens of a stream.

    .venv/bin/python bench/realengine_flood.py            # about 4 minutes on two cores
    .venv/bin/python bench/realengine_flood.py --json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen import (
    MODEL,
    Outcome,
    body,
    client,
    configure_gateway,
    fmt,
    gateway_counts,
    jain,
    percentile,
    stream_once,
)

from llmserver.testing.llama_server import ALIAS, LlamaServer, missing, start_llama_server
from llmserver.testing.processes import Database, start_gateway
from llmserver.testing.vllm_server import VllmServer

WAYS = ("direct", "defaults", "llamacpp", "openai", "llamacpp-preempt", "ideal")
POWER_PROMPT = "Write a long story about a lighthouse keeper."
# --whole: two heavy users, the second on a tier of twice the weight, and a batch-tier user.
HEAVY_WEIGHTS = {"heavyA": 1.0, "heavyB": 2.0}
HEAVY_PROMPT = "Summarise the history of lighthouses."
HEAVY_TOKENS = 32
# Marks for vLLM's own priority mode, by class (lower first).
MARKS = {"light": 0, "power": 1, "heavy": 1, "batch": 2}
LIGHT_PROMPT = "Say hello."
# The engine's own view, sampled through each way (`EngineTrace`): the sequences it runs, the
# prompt tokens it has computed, and the seconds and count of the gaps between two tokens of a
# stream (its decode step, as the scheduler learns it: `tenants/backend_kinds.py`).
ENGINE_GAUGES = {
    VllmServer: (
        "vllm:num_requests_running",
        "vllm:prompt_tokens_total",
        "vllm:inter_token_latency_seconds_sum",
        "vllm:inter_token_latency_seconds_count",
    ),
    LlamaServer: (
        "llamacpp:requests_processing",
        "llamacpp:prompt_tokens_total",
        "llamacpp:tokens_predicted_seconds_total",
        "llamacpp:tokens_predicted_total",
    ),
}
SAMPLE_SECONDS = 0.25


@dataclass
class EngineTrace:
    """What the engine itself did through one way: how many sequences it ran, sampled every
    SAMPLE_SECONDS (seconds from the load's start, running), and the prompt tokens it computed.
    Apart, they show where a makespan above its floor went: slots left empty, or prompts
    computed again (a paused stream's resume)."""

    running: list[tuple[float, float]] = field(default_factory=list)
    prompt_tokens: float = 0.0
    step_seconds: float | None = None  # the mean gap between two tokens of a stream
    # CPU seconds each process tree used through the load ("engine", "gateway", "bench"): on
    # two shared cores, what the gateway uses beside an engine that wants both is taken from
    # the engine's steps.
    cpu: dict[str, float] = field(default_factory=dict)

    def slots_busy(self, until: float, slots: int) -> float | None:
        """The mean share of the slots running, up to `until` (the power user's end)."""
        seen = [n for t, n in self.running if t <= until]
        return sum(min(n, slots) for n in seen) / (len(seen) * slots) if seen else None


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds used so far by `pid` and every live descendant (read from
    /proc; 0.0 where there is none, as off Linux)."""
    parents: dict[int, int] = {}
    times: dict[int, float] = {}
    tick = os.sysconf("SC_CLK_TCK")
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue  # gone meanwhile
        child = int(stat.parent.name)
        parents[child] = int(fields[1])
        times[child] = (int(fields[11]) + int(fields[12])) / tick
    tree, grown = {pid}, True
    while grown:
        more = {c for c, parent in parents.items() if parent in tree} - tree
        tree |= more
        grown = bool(more)
    return sum(times.get(p, 0.0) for p in tree)


async def trace_engine(engine: LlamaServer | VllmServer, t0: float, trace: EngineTrace) -> None:
    """Fill `trace` until cancelled."""
    running, *grow = ENGINE_GAUGES[type(engine)]
    first: list[float] | None = None
    while True:
        m = await asyncio.to_thread(engine.metrics)
        trace.running.append((time.monotonic() - t0, m.get(running, 0.0)))
        now = [m.get(name, 0.0) for name in grow]
        first = now if first is None else first
        prompts, gaps, tokens = (b - a for a, b in zip(first, now, strict=True))
        trace.prompt_tokens = prompts
        trace.step_seconds = gaps / tokens if tokens else None
        await asyncio.sleep(SAMPLE_SECONDS)


def parse_args(
    argv: list[str] | None = None,
    ways: tuple[str, ...] = WAYS,
    doc: str | None = __doc__,
    more: Callable[[argparse.ArgumentParser], object] | None = None,
) -> argparse.Namespace:
    """The flood's options; bench/vllm_flood.py and bench/vllm_calibrate.py share them, the
    latter adding its own (`more`)."""
    p = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawTextHelpFormatter)
    if more is not None:
        more(p)
    p.add_argument("--ways", default=",".join(ways))
    p.add_argument("--slots", type=int, default=4, help="the engine's slots (-np, --max-num-seqs)")
    p.add_argument("--power-requests", type=int, default=48)
    p.add_argument("--power-max-tokens", type=int, default=64)
    p.add_argument("--light-users", type=int, default=3)
    p.add_argument("--light-interval", type=float, default=3.0)
    p.add_argument("--light-max-tokens", type=int, default=16)
    p.add_argument("--duration", type=float, default=30.0)
    p.add_argument("--light-delay", type=float, default=1.0, help="after the power burst")
    p.add_argument(
        "--whole",
        action="store_true",
        help="add the product's other users: a weighted heavy pair and a batch-tier user",
    )
    p.add_argument(
        "--heavy-outstanding", type=int, default=4, help="streams each heavy user keeps open"
    )
    p.add_argument("--batch-requests", type=int, default=8)
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


async def run_load(url: str, args: argparse.Namespace, keys: dict[str, str] | None,
                   with_power: bool, model: str = MODEL,
                   priority: dict[str, int] | None = None,
                   engine: LlamaServer | VllmServer | None = None,
                   gateway_pid: int | None = None,
                   ) -> tuple[list[Outcome], float, EngineTrace]:  # fmt: skip
    """The flood; `priority` (class -> value) marks each class's requests for an engine that
    schedules by priority; `engine`: the engine behind `url`, traced meanwhile;
    `gateway_pid`: the gateway in front of it, whose CPU is counted."""
    marks = priority or {}
    endpoint = url + "/v1/chat/completions"
    tasks: list[asyncio.Task[Outcome]] = []
    trace = EngineTrace()
    pids: dict[str, int] = {}
    if engine is not None:
        pids["engine"] = engine.process.pid
    if gateway_pid is not None:
        pids["gateway"] = gateway_pid
    cpu0 = {name: cpu_seconds(pid) for name, pid in pids.items()}
    bench0 = time.process_time()  # this process alone: the engine and gateway are its children
    async with client() as http:
        t0 = time.monotonic()
        tracer = asyncio.ensure_future(trace_engine(engine, t0, trace)) if engine else None

        def launch(user: str, cls: str, data: dict[str, Any]) -> asyncio.Task[Outcome]:
            key = keys[user] if keys else None
            outcome = Outcome(cls, user, 0.0)
            tasks.append(asyncio.ensure_future(stream_once(http, endpoint, key, data, outcome, t0)))
            return tasks[-1]

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

        async def heavy(user: str) -> None:
            """A closed loop: a new stream as soon as one ends, until the window closes."""
            k = 0
            await asyncio.sleep(max(0.0, t0 + args.light_delay - time.monotonic()))
            while time.monotonic() - t0 < args.duration:
                prompt = f"[{user} #{k}] {HEAVY_PROMPT}"
                k += 1
                await launch(
                    user, "heavy", body(prompt, HEAVY_TOKENS, True, marks.get("heavy"), model)
                )

        loops = [light(i) for i in range(args.light_users)]
        if args.whole and with_power:
            for i in range(args.batch_requests):
                data = body(
                    f"[batch #{i}] {HEAVY_PROMPT}", HEAVY_TOKENS, True, marks.get("batch"), model
                )
                launch("batch", "batch", data)
            loops += [heavy(u) for u in HEAVY_WEIGHTS for _ in range(args.heavy_outstanding)]
        await asyncio.gather(*loops)
        done, pending = await asyncio.wait(tasks, timeout=args.duration * 10 + 120)
        for task in pending:
            task.cancel()
        wall = time.monotonic() - t0
        trace.cpu = {name: cpu_seconds(pid) - cpu0[name] for name, pid in pids.items()}
        trace.cpu["bench"] = time.process_time() - bench0
        if tracer is not None:
            tracer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await tracer
    outcomes = [t.result() for t in done]
    return outcomes, wall, trace


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
        outcomes, wall, trace = await run_load(llama.url, args, None, way == "direct", engine=llama)
        return summarise(way, outcomes, wall, args.slots, trace)
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
        tiers = {} if way == "defaults" else {"interactive": plenty}
        keys = configure_gateway(gw, *gateway_users(args, tiers))
        outcomes, wall, trace = await run_load(
            gw.url, args, keys, True, engine=llama, gateway_pid=gw.process.pid
        )
        counts = await gateway_counts(gw.url)
    finally:
        gw.stop()
        db.drop()
        tmp.cleanup()
    return summarise(way, outcomes, wall, args.slots, trace, counts)


def gateway_users(
    args: argparse.Namespace, tiers: dict[str, dict[str, Any]]
) -> tuple[dict[str, dict[str, Any]], list[tuple[str, str, str]]]:
    """`tiers` and the keys of every user of the load; with --whole, the heavy pair's second
    user on a new tier `heavy2` of weight 2 in the interactive band (the demo's tiers
    untouched), and the batch user on the demo's batch tier."""
    users = [("power", "interactive", "chat")]
    users += [(f"light{i + 1}", "interactive", "chat") for i in range(args.light_users)]
    if not args.whole:
        return tiers, users
    users += [("heavyA", "interactive", "chat"), ("heavyB", "heavy2", "chat")]
    users += [("batch", "batch", "batch")]
    return {**tiers, "heavy2": {"weight": HEAVY_WEIGHTS["heavyB"], "band": 0}}, users


def generated(o: Outcome) -> int:
    """Its tokens, as its usage counts them, else as its text chunks do."""
    return o.completion_tokens if o.completion_tokens is not None else o.tokens


def summarise(
    way: str,
    outcomes: list[Outcome],
    wall: float,
    slots: int,
    trace: EngineTrace,
    gateway: dict[str, float] | None = None,
) -> dict[str, Any]:
    """Per class: TTFT, failures (an error, refused, or an error event in a stream answered
    200, such as a queue timeout after the headers went out), broken streams (begun, then
    ended with an error or without a finish reason) and the makespan of those served; per
    light request, the gateway's pauses (`evictions`) and those continued mid-stream
    (`resumes`); the engine's slots busy until the power user's end (and its samples), the
    prompt tokens it computed and its mean gap between two tokens of a stream."""
    out: dict[str, Any] = {"way": way, "wall_s": wall, "prompt_tokens": trace.prompt_tokens}
    out["step_s"] = trace.step_seconds
    out["running"] = trace.running
    out["cpu_s"] = trace.cpu
    classes = ("light", "power", "heavy", "batch")
    for cls in (c for c in classes if c in {"light", "power"} | {o.cls for o in outcomes}):
        mine = [o for o in outcomes if o.cls == cls]
        ttft = [o.ttft for o in mine if o.ttft is not None and o.error is None]
        failed = [o.error for o in mine if o.error is not None]
        broken = [o for o in mine if o.ttft is not None and (o.error or not o.finish_reason)]
        out[cls] = {
            "n": len(mine),
            "ttft_p50": percentile(ttft, 50),
            "ttft_p99": percentile(ttft, 99),
            "failed": len(failed),
            "broken": len(broken),
            "errors": sorted(set(failed))[:3],
            "makespan": max(
                (o.sent + (o.e2e or 0.0) for o in mine if o.error is None), default=None
            ),
            "tokens": sum(generated(o) for o in mine if o.error is None),
        }
    power_end = out["power"]["makespan"]
    out["slots_busy"] = trace.slots_busy(power_end if power_end is not None else wall, slots)
    if power_end is not None:
        # The tokens served by the power user's last one, every class's: at a full engine a
        # step serves a token a slot whoever's it is, so the makespan can shrink no further
        # than this work against FIFO's (`table`'s floor).
        out["work_by_power_end"] = sum(
            generated(o)
            for o in outcomes
            if o.error is None and o.e2e is not None and o.sent + o.e2e <= power_end
        )
    heavy = [o for o in outcomes if o.cls == "heavy" and o.error is None and o.e2e is not None]
    if heavy:
        # Service inside the window (their streams are alike): tokens of the streams that
        # ended in it, per unit of the user's weight.
        end = max(o.sent for o in heavy)
        served = {u: sum(o.tokens for o in heavy if o.user == u and o.sent + (o.e2e or 0) <= end)
                  for u in HEAVY_WEIGHTS}  # fmt: skip
        out["heavy_served"] = served
        out["heavy_jain"] = jain([served[u] / w for u, w in HEAVY_WEIGHTS.items()])
    if gateway is not None:
        lights = max(1, out["light"]["n"])
        out["gateway"] = gateway
        recalled = gateway.get("preempted_recalled", 0.0)  # called back, not evicted
        out["recalls_per_light"] = recalled / lights
        out["evictions_per_light"] = (
            sum(v for k, v in gateway.items() if k.startswith("preempted_")) - recalled
        ) / lights
        out["resumes_per_light"] = gateway.get("preempted_resumable", 0.0) / lights
    return out


def table(results: list[dict[str, Any]]) -> str:
    """One row a way; the power user's makespan also as a ratio to the first way's (FIFO), beside
    its floor: the tokens every class was served by then, against the first way's. Serving the
    light users during the flood adds their tokens to the power user's wait whoever schedules;
    a makespan above its floor is throughput lost (slots left idle, prompts computed again)."""
    rows = [
        "| way | light TTFT p50 | light p99 | light failed / broken | power TTFT p50 "
        "| power failed / broken | power makespan (x first; its floor) | evictions / resumes per light "
        "| slots busy to the power end | prompt tokens computed | token gap ms "
        "| CPU s engine / gateway / bench |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    if any("heavy_jain" in r for r in results):
        rows[0] += " Jain (heavy tokens / weight) | batch failed / broken |"
        rows[1] += "---|---|"
    first = results[0]["power"]["makespan"] if results else None
    work = results[0].get("work_by_power_end") if results else None
    for r in results:
        light, power = r["light"], r["power"]
        span = power["makespan"]
        ratio = f" ({span / first:.2f}x)" if span and first else ""
        if ratio and work and r.get("work_by_power_end"):
            ratio = f"{ratio[:-1]}; floor {r['work_by_power_end'] / work:.2f}x)"
        pauses = (
            f"{r['evictions_per_light']:.2f} / {r['resumes_per_light']:.2f}"
            if "gateway" in r
            else "-"
        )
        busy = r.get("slots_busy")
        pauses += f" | {'-' if busy is None else f'{busy:.0%}'} | {r['prompt_tokens']:.0f}"
        pauses += f" | {fmt(r['step_s'], 1000, digits=0)}"
        cpu = r.get("cpu_s", {})
        pauses += " | " + " / ".join(
            fmt(cpu.get(p), digits=1) for p in ("engine", "gateway", "bench")
        )
        if "heavy_jain" in r:
            pauses += f" | {fmt(r['heavy_jain'], digits=3)} | {r['batch']['failed']} / " \
                      f"{r['batch']['broken']} of {r['batch']['n']}"  # fmt: skip
        rows.append(
            f"| {r['way']} | {fmt(light['ttft_p50'])} s | {fmt(light['ttft_p99'])} s "
            f"| {light['failed']} / {light['broken']} of {light['n']} "
            f"| {fmt(power['ttft_p50'])} s | {power['failed']} / {power['broken']} of "
            f"{power['n']} | {fmt(span, digits=1)} s{ratio} | {pauses} |"
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
