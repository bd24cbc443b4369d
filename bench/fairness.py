"""Fairness benchmark: do light users stay fast while a power user floods the backend?

One invocation runs the same load several ways, each against a fresh simulator (vLLM-like:
continuous batching, `--max-num-seqs` running sequences, a waiting queue):

  fifo      straight to the simulator, FIFO waiting queue (vLLM's default)
  priority  straight to the simulator in priority mode (light users priority 0, power user 1)
  defaults  through the gateway at the product's defaults, everyone on the demo's interactive
            tier: the backend as the demo makes it (capacity learned, preemption on), the tier's
            gate and preemption (after 150 ms) untouched. The one change every gateway way
            makes: the per-user limits raised (`max_concurrent_per_user` 64, queued 1000), as
            at the defaults (4 running, 64 queued) the flood is refused with 429 queue_full
  gateway   the same with preemption off (`preempt_after_ms` blank), so the gateway's fair
            share of what it has not yet sent is what is measured
  gateway-batch  (with --batch-variant) `gateway` with the power user's key on the batch band
  gateway-exact  `gateway` with the backend's capacity set (exact slot accounting from the
            first request, not once learned) and never letting it queue (interactive gate:
            waiting < 1)
  gateway-priority  the defaults in front of the simulator in priority mode, with the
            backend's priority_scheduling ticked (so the gateway hands its coarse priority down):
            a backend declared so must never do worse than one that is not
  gateway-2proc  as `gateway`, but two gateway processes sharing one scheduler through Redis
            (REDIS_URL, default database 4): the power user sends through one, the light users
            through the other
  gateway-preempt  the defaults with the capacity set (exact slots from the first request, not
            once learned) and `--preempt-after-ms`: a light request that has waited that long
            with every slot busy pauses the newest stream of the power user, which is resumed
            later with `continue_final_message`
Every power stream is checked word for word against its uninterrupted answer in every way.
  ideal     the light users alone, straight to the simulator

The load: the power user submits `--power-requests` streaming requests at once; `--light-users`
users each send one streaming request every `--light-interval` seconds for `--duration` seconds.
Reported per class: time to first token and end-to-end latency (p50/p95/p99); the backend's
generated tokens/s, while the light users send (the flood backlogged in every way) and over the
whole run (its drain included), and busy fraction (deltas of the simulator's counters); and the
power user's makespan (first submission to last completion).

    .venv/bin/python bench/fairness.py                # about 5 minutes
    .venv/bin/python bench/fairness.py --quick --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import tempfile
import time
import uuid
from dataclasses import asdict
from pathlib import Path
from typing import Any

from loadgen import (
    Outcome,
    add_engine_arguments,
    add_flood_arguments,
    answer_sha,
    body,
    client,
    configure_gateway,
    counters,
    fmt,
    ge,
    generated_tokens,
    le,
    lt,
    percentile,
    power_lengths,
    ratio,
    simulator_args,
    stream_once,
)

from llmserver.testing.processes import Database, start_gateway, start_peer
from simulator.launcher import start_simulator

ROOT = Path(__file__).resolve().parents[1]
WAYS = (
    "fifo",
    "priority",
    "defaults",
    "gateway",
    "gateway-batch",
    "gateway-exact",
    "gateway-priority",
    "gateway-2proc",
    "gateway-preempt",
    "ideal",
)
REDIS_URL = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/4")
POWER_PROMPT = "Summarise the following evaluation transcript in detail. " * 7
LIGHT_PROMPT = "What is the capital of France? Answer briefly. "


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=60.0, help="Light users send for this long.")
    add_flood_arguments(p)
    p.add_argument("--scrape-interval", type=float, help="The gateway's SCRAPE_INTERVAL.")
    p.add_argument("--light-users", type=int, default=5)
    p.add_argument("--light-interval", type=float, default=3.0)
    p.add_argument("--light-max-tokens", type=int, default=32)
    p.add_argument("--light-delay", type=float, default=1.0, help="Light users start after this.")
    add_engine_arguments(p)
    p.add_argument(
        "--preempt-after-ms",
        type=float,
        default=150.0,
        help="The interactive tier's preempt_after in the gateway-preempt way.",
    )
    p.add_argument("--gate-max-waiting", type=int, help="Override the interactive tier's gate.")
    p.add_argument("--batch-variant", action="store_true", help="Also run gateway-batch.")
    p.add_argument("--ways", default="", help="Comma-separated subset of the ways to run.")
    p.add_argument("--quick", action="store_true", help="20 s of light load, shorter streams.")
    p.add_argument("--plot", type=Path, default=ROOT / "docs" / "img" / "fairness_ttft.png")
    p.add_argument("--no-plot", action="store_true")
    p.add_argument("--json", action="store_true", help="Print JSON instead of the table.")
    args = p.parse_args(argv)
    if args.quick:
        args.duration, args.power_max_tokens = 20.0, 64
    return args


def chosen_ways(args: argparse.Namespace) -> list[str]:
    if args.ways:
        ways = [w.strip() for w in args.ways.split(",") if w.strip()]
        unknown = set(ways) - set(WAYS)
        if unknown:
            raise SystemExit(f"unknown ways: {sorted(unknown)}")
        return ways
    return [w for w in WAYS if w != "gateway-batch" or args.batch_variant]


# the load ---------------------------------------------------------------------------------


def launch(
    http: Any, url: str, key: str | None, data: dict, outcome: Outcome, t0: float
) -> asyncio.Task[Outcome]:
    task = asyncio.ensure_future(stream_once(http, url, key, data, outcome, t0))
    task.outcome = outcome  # type: ignore[attr-defined]
    return task


async def light_user(
    http: Any, url: str, key: str | None, user: str, index: int, args: argparse.Namespace,
    t0: float, priority: int | None, tasks: list[asyncio.Task[Outcome]],
) -> None:  # fmt: skip
    """Open loop: one request every interval, whatever is still outstanding."""
    offset = args.light_delay + index * args.light_interval / max(args.light_users, 1)
    k = 0
    while (at := offset + k * args.light_interval) < args.duration:
        await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
        data = body(f"[{user} #{k}] " + LIGHT_PROMPT, args.light_max_tokens, True, priority)
        tasks.append(launch(http, url, key, data, Outcome("light", user, 0.0), t0))
        k += 1


async def run_load(
    base_url: str,
    simulator_url: str,
    args: argparse.Namespace,
    keys: dict[str, str] | None,
    priorities: tuple[int, int] | None,
    with_power: bool,
    light_base_url: str | None = None,
) -> dict[str, Any]:
    """Drive one way's load; returns the outcomes and the simulator's counter deltas. The light
    users send to `light_base_url` if given (another gateway process of the same cluster)."""
    url = base_url + "/v1/chat/completions"
    light_url = (light_base_url or base_url) + "/v1/chat/completions"
    light_p, power_p = priorities if priorities else (None, None)
    async with client() as http:
        before = await counters(http, simulator_url)
        t0 = time.monotonic()
        samples: list[tuple[float, float, float, float]] = []
        sampler = asyncio.ensure_future(sample_backend(http, simulator_url, t0, samples))
        tasks: list[asyncio.Task[Outcome]] = []
        if with_power:
            for i, length in enumerate(power_lengths(args)):
                data = body(f"[power #{i}] " + POWER_PROMPT, length, True, power_p)
                key = keys["power"] if keys else None
                tasks.append(launch(http, url, key, data, Outcome("power", "power", 0.0), t0))
        users = [f"light{i + 1}" for i in range(args.light_users)]
        await asyncio.gather(
            *(
                light_user(
                    http, light_url, keys[u] if keys else None, u, i, args, t0, light_p, tasks
                )
                for i, u in enumerate(users)
            )
        )
        budget = args.duration * 6 + 120
        done, pending = await asyncio.wait(tasks, timeout=budget)
        for task in pending:
            task.cancel()
        wall = time.monotonic() - t0
        sampler.cancel()
        after = await counters(http, simulator_url)
    outcomes = [t.result() for t in done] + [pending_outcome(t) for t in pending]
    return {
        "outcomes": outcomes,
        "wall": wall,
        "before": before,
        "after": after,
        "samples": samples,
        "window": (args.light_delay, args.light_delay + args.duration),
    }


async def sample_backend(
    http: Any, simulator_url: str, t0: float, samples: list[tuple[float, float, float, float]]
) -> None:
    """(time, running, waiting, generated tokens) of the simulator every 0.2 s, to see how full
    the batch is and how fast it generates while the flood is backlogged."""
    while True:
        values = await counters(http, simulator_url)
        samples.append(
            (
                time.monotonic() - t0,
                values.get("vllm:num_requests_running", 0.0),
                values.get("vllm:num_requests_waiting", 0.0),
                generated_tokens(values),
            )
        )
        await asyncio.sleep(0.2)


def pending_outcome(task: asyncio.Task[Outcome]) -> Outcome:
    outcome: Outcome = task.outcome  # type: ignore[attr-defined]
    outcome.error = outcome.error or "timed out"
    return outcome


# the ways ---------------------------------------------------------------------------------


def gateway_keys(args: argparse.Namespace, power_tier: str) -> tuple[dict, list]:
    concurrency = max(64, args.max_num_seqs + 16)
    queued = max(1000, args.power_requests * 2)
    interactive: dict[str, Any] = {
        "max_concurrent_per_user": concurrency,
        "max_queued_per_user": queued,
        "queue_timeout_seconds": 3600.0,
    }
    if power_tier != "interactive-defaults":
        preempt = power_tier == "interactive-preempt"
        interactive["preempt_after_ms"] = args.preempt_after_ms if preempt else None
    if args.gate_max_waiting is not None:
        interactive["gate_max_waiting"] = args.gate_max_waiting
    tiers = {
        "interactive": interactive,
        "batch": {"max_concurrent_per_user": concurrency, "max_queued_per_user": queued},
    }
    power_app = "batch" if power_tier == "batch" else "chat"
    keys = [("power", "batch" if power_tier == "batch" else "interactive", power_app)]
    keys += [(f"light{i + 1}", "interactive", "chat") for i in range(args.light_users)]
    return tiers, keys


async def run_way(way: str, args: argparse.Namespace) -> dict[str, Any]:
    policy = "priority" if way in ("priority", "gateway-priority") else "fcfs"
    sim = start_simulator(*simulator_args(args, policy), quiet=True)
    gw = db = peer = None
    tmp = tempfile.TemporaryDirectory(prefix="bench-fairness-")
    try:
        if way.startswith("gateway") or way == "defaults":
            db = Database(Path(tmp.name))
            env = {"SCRAPE_INTERVAL": str(args.scrape_interval)} if args.scrape_interval else {}
            if way == "gateway-2proc":
                env |= {"SCHEDULER_TRANSPORT": "redis", "REDIS_URL": REDIS_URL}
                env["CLUSTER_PREFIX"] = f"bench-fairness-{uuid.uuid4().hex[:8]}"
            gw = start_gateway(
                db.url, sim.url, env, quiet=os.environ.get("BENCH_ACCESS_LOG") is None
            )
            if way == "gateway-2proc":
                peer = start_peer(gw)
            power_tier = {
                "gateway-batch": "batch",
                "gateway-preempt": "interactive-preempt",
                "defaults": "interactive-defaults",
                "gateway-priority": "interactive-defaults",
            }
            tiers, key_specs = gateway_keys(args, power_tier.get(way, "interactive"))
            backends = {}
            if way in ("gateway-exact", "gateway-preempt"):
                backends["simulator"] = {"capacity": args.max_num_seqs}
                tiers["interactive"]["gate_max_waiting"] = 1
            if way == "gateway-priority":
                backends["simulator"] = {"priority_scheduling": True}
            keys = configure_gateway(gw, tiers, key_specs, backends)
            light_url = peer.url if peer is not None else None
            run = await run_load(gw.url, sim.url, args, keys, None, True, light_url)
            async with client() as http:
                run["gateway"] = await counters(http, gw.url)
        else:
            priorities = (0, 1) if way == "priority" else None
            run = await run_load(sim.url, sim.url, args, None, priorities, way != "ideal")
    finally:
        if peer is not None:
            peer.stop()
        if gw is not None:
            gw.stop()
        if db is not None:
            db.drop()
        sim.stop()
        tmp.cleanup()
    return summarise(way, run)


# the figures ------------------------------------------------------------------------------


def latency_stats(outcomes: list[Outcome], attr: str) -> dict[str, float | None]:
    values = [getattr(o, attr) for o in outcomes if getattr(o, attr) is not None]
    return {f"p{q}": percentile(values, q) for q in (50, 95, 99)} | {
        "max": max(values) if values else None
    }


def summarise(way: str, run: dict[str, Any]) -> dict[str, Any]:
    outcomes: list[Outcome] = run["outcomes"]
    before, after, wall = run["before"], run["after"], run["wall"]
    tokens = generated_tokens(after) - generated_tokens(before)
    busy = after.get("simulator_busy_seconds_total", 0) - before.get(
        "simulator_busy_seconds_total", 0
    )
    result: dict[str, Any] = {
        "way": way,
        "wall_seconds": wall,
        "backend_tokens_per_second": tokens / wall if wall else None,
        "backend_busy_fraction": busy / wall if wall else None,
        "backend_generated_tokens": tokens,
    }
    for cls in ("light", "power"):
        mine = [o for o in outcomes if o.cls == cls]
        ok = [o for o in mine if o.error is None]
        result[cls] = {
            "requests": len(mine),
            "errors": len(mine) - len(ok),
            "error_examples": sorted({o.error for o in mine if o.error})[:3],
            "ttft": latency_stats(ok, "ttft"),
            "e2e": latency_stats(ok, "e2e"),
        }
    power = [o for o in outcomes if o.cls == "power" and o.e2e is not None]
    result["power_makespan_seconds"] = max((o.sent + o.e2e for o in power), default=None)
    makespan = result["power_makespan_seconds"]
    busy_samples = [s for s in run["samples"] if makespan is None or s[0] <= makespan]
    result["backend_mean_running"] = (
        sum(s[1] for s in busy_samples) / len(busy_samples) if busy_samples else None
    )
    result["backend_steady_tokens_per_second"] = steady_rate(run["samples"], run["window"])
    result["backend_mean_waiting"] = (
        sum(s[2] for s in busy_samples) / len(busy_samples) if busy_samples else None
    )
    result["light_timeline"] = sorted(
        (o.sent, o.ttft) for o in outcomes if o.cls == "light" and o.ttft is not None
    )
    result["power_completion_tokens"] = sum(o.tokens for o in outcomes if o.cls == "power")
    result["power_streams_intact"] = sum(
        1 for o in outcomes if o.cls == "power" and o.text_sha == answer_sha(o.tokens)
    )
    gateway = run.get("gateway", {})
    evictions = sum(v for k, v in gateway.items() if k.startswith("llmserver_preemptions_total"))
    light = result["light"]["requests"]
    result["evictions"] = evictions
    result["evictions_per_light_request"] = evictions / light if light else None
    result["outcomes"] = [asdict(o) for o in outcomes]
    return result


def steady_rate(
    samples: list[tuple[float, float, float, float]], window: tuple[float, float]
) -> float | None:
    """Generated tokens/s between the samples nearest the window's ends: while the light users
    send, every way still has the flood backlogged, so this is the rate at which the batch
    works. The whole run's rate also counts the drain at the end, whose shape depends on where
    the light requests went: FIFO leaves them queued to the end, where they fill the slots the
    flood's last streams free; a way that served them at once drains with idle slots."""
    inside = [s for s in samples if window[0] <= s[0] <= window[1]]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    return (inside[-1][3] - inside[0][3]) / (inside[-1][0] - inside[0][0])


def targets(results: dict[str, dict[str, Any]]) -> list[tuple[str, str, bool | None]]:
    """(target, measured, met) for each of the issue's targets that this run can check, for
    the defaults, the gateway without preemption, and preemption with the capacity set."""
    checks: list[tuple[str, str, bool | None]] = []
    fifo, prio = results.get("fifo"), results.get("priority")
    for way in ("defaults", "gateway-priority", "gateway", "gateway-preempt"):
        gw = results.get(way)
        if gw is None:
            continue
        p50, p99 = gw["light"]["ttft"]["p50"], gw["light"]["ttft"]["p99"]
        if prio:
            other = prio["light"]["ttft"]["p99"]
            checks.append(
                (
                    f"{way}: light TTFT p99 below vLLM priority mode's",
                    f"{fmt(p99)} s vs {fmt(other)} s",
                    lt(p99, other),
                )
            )
        if way in ("defaults", "gateway-priority", "gateway-preempt"):
            checks.append((f"{way}: light TTFT p99 < 0.3 s", f"{fmt(p99)} s", lt(p99, 0.3)))
            if prio:
                quarter = prio["light"]["ttft"]["p99"] / 4
                checks.append(
                    (f"{way}: light TTFT p99 < 1/4 of priority mode's", f"{fmt(p99)} s vs "
                     f"{fmt(quarter)} s", lt(p99, quarter))
                )  # fmt: skip
            checks.append((f"{way}: light TTFT p50 < 0.25 s", f"{fmt(p50)} s", lt(p50, 0.25)))
            power = gw["power"]["requests"]
            checks.append(
                (
                    f"{way}: every power stream word for word its uninterrupted answer",
                    f"{gw['power_streams_intact']} of {power}",
                    gw["power_streams_intact"] == power,
                )
            )
            per_light = gw["evictions_per_light_request"]
            checks.append(
                (
                    f"{way}: at most one eviction per light request",
                    fmt(per_light, 1, 2),
                    le(per_light, 1.0),
                )
            )
        if fifo:
            steady = ratio(
                gw["backend_steady_tokens_per_second"], fifo["backend_steady_tokens_per_second"]
            )
            whole = ratio(gw["backend_tokens_per_second"], fifo["backend_tokens_per_second"])
            checks.append(
                (
                    f"{way}: tokens/s while the flood is backlogged >= 98% of FIFO's",
                    f"{fmt(steady, 100, 1)}% (whole run, drain included: {fmt(whole, 100, 1)}%)",
                    ge(steady, 0.98),
                )
            )
            mine, base = gw["power_completion_tokens"], fifo["power_completion_tokens"]
            checks.append(
                (
                    f"{way}: power completion tokens identical to FIFO's",
                    f"{mine} vs {base}",
                    mine == base,
                )
            )
    return checks


def table(results: dict[str, dict[str, Any]]) -> str:
    head = (
        "| way | light TTFT p50 / p95 / p99 (s) | light e2e p50 / p99 (s) | "
        "power TTFT p50 / p99 (s) | power e2e p50 (s) | power makespan (s) | "
        "tokens/s steady / whole run | busy | running / waiting | errors (light/power) |"
    )
    lines = [head, "|" + "---|" * 10]
    for way, r in results.items():
        lt, le, pt, pe = (
            r["light"]["ttft"],
            r["light"]["e2e"],
            r["power"]["ttft"],
            r["power"]["e2e"],
        )
        lines.append(
            f"| {way} | {fmt(lt['p50'])} / {fmt(lt['p95'])} / {fmt(lt['p99'])} "
            f"| {fmt(le['p50'])} / {fmt(le['p99'])} "
            f"| {fmt(pt['p50'])} / {fmt(pt['p99'])} | {fmt(pe['p50'])} "
            f"| {fmt(r['power_makespan_seconds'], 1, 1)} "
            f"| {fmt(r['backend_steady_tokens_per_second'], 1, 0)} / "
            f"{fmt(r['backend_tokens_per_second'], 1, 0)} "
            f"| {fmt(r['backend_busy_fraction'], 100, 0)}% "
            f"| {fmt(r['backend_mean_running'], 1, 1)} / {fmt(r['backend_mean_waiting'], 1, 1)} "
            f"| {r['light']['errors']}/{r['power']['errors']} |"
        )
    lines += ["", "| target | measured | met |", "|---|---|---|"]
    for name, measured, met in targets(results):
        lines.append(
            f"| {name} | {measured} | {'-' if met is None else ('yes' if met else 'NO')} |"
        )
    return "\n".join(lines)


def plot(results: dict[str, dict[str, Any]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(9, 4.8), dpi=110)
    for way, r in results.items():
        points = r["light_timeline"]
        if points:
            ax.plot([p[0] for p in points], [p[1] for p in points], marker=".", label=way)
    ax.set_yscale("log")
    ax.axhline(1.0, color="grey", linestyle="--", linewidth=0.8)
    ax.set_xlabel("request sent at (s after the flood)")
    ax.set_ylabel("light-user time to first token (s, log)")
    ax.set_title(title)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    for way in chosen_ways(args):
        print(f"running {way} ...", file=sys.stderr, flush=True)
        results[way] = await run_way(way, args)
    if not args.no_plot:
        plot(
            results,
            args.plot,
            f"{args.power_requests} power streams vs {args.light_users} light users "
            f"(max_num_seqs {args.max_num_seqs})",
        )
    settings = {k: str(v) if isinstance(v, Path) else v for k, v in vars(args).items()}
    if args.json:
        slim = {w: {k: v for k, v in r.items() if k != "outcomes"} for w, r in results.items()}
        checks = [{"target": t, "measured": m, "met": ok} for t, m, ok in targets(results)]
        print(json.dumps({"settings": settings, "results": slim, "targets": checks}, indent=2))
    else:
        print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
