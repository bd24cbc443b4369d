"""Whole-product scenario: every kind of user at once, on two backends, at the product's defaults.

Everything happens in one run per way, on two vLLM-like simulators serving the one model
(`--max-num-seqs` 16 each, FIFO waiting queue, fairness.py's step timing):

  power     at t=0 sends `--power-requests` (200) streaming requests at once, lengths seeded
            uniform 100..300 tokens (fairness.py's power_lengths)
  light     `--light-users` (5) users, each one short streaming request (max_tokens 32) every
            `--light-interval` (4) s, staggered, from t=1 s for `--duration` seconds
  A, B, C   three weighted heavy users, closed loop, 24 streams outstanding each:
            A 400-word prompts / 30 tokens, B 20 words / 200 tokens, C 120 words / 100 tokens;
            B's tier has weight 2, A's and C's weight 1
  batch     one batch-tier user, closed loop, 8 outstanding, 100-word prompts, 100 tokens

Every prompt starts with its user and request number, so no two share a prefix. The closed loops
send until the window ends; then the run waits (at most `--drain-timeout` s) for every stream
still open, the flood's included, so that every stream can be checked.

Ways, each against fresh simulators (and a fresh gateway and database):

  fifo      straight to the simulators (the load generator alternates requests between them)
  priority  straight to simulators in vLLM priority mode, marked by hand: light users
            priority 0, everyone else 1
  defaults  through the gateway at the product's defaults: the demo's backend plus the second
            simulator as a second backend of the same model (capacity blank, preemption on,
            max_in_flight 64), the fair-share policy untouched (tokens, w_in 1, w_out 4); power
            and light users on the demo's interactive tier, A and C on a new tier "heavy", B on a
            new tier "heavy2" (weight 2), both created with only their weight, band and per-user
            limits set (gates and preemption the model's defaults; the band interactive, the
            demo tenant's default tier's, because the model's default, standard, would put them
            below the flood, which strict band order serves first, so no weight could show),
            the batch user on the demo's batch tier. The one change from the defaults: every tier used gets
            max_concurrent_per_user 64, max_queued_per_user 1000 and queue_timeout_seconds
            3600, because the load exceeds the demo's per-user limits by design; at those limits
            the flood would be refused with 429 queue_full, a different defence from the one
            measured here.
  ideal     the light users alone, straight to the simulators

Measured inside the steady window (from the light users' start to the end of `--duration`):
light TTFT p50 / p95 / p99 (time to the first chunk with text) and errors; Jain's index over
the heavy users' service / weight, service in the tokens unit (prompt + 4 x completion tokens of
their requests completed inside the window, from the streams' usage chunk), and each heavy user's
share; both simulators' generated tokens/s (their counters sampled every 0.2 s), and as a ratio
to FIFO's in the same run. Over the whole run: the gateway's evictions
(`llmserver_preemptions_total`, less the jobs called back from an engine's queue before they
started, kind `recalled`, which are shown apart), per light request and per completed request;
stream integrity
(each completed stream has max_tokens text chunks and reads, word for word, as the simulator's
uninterrupted answer of that length), per class; the batch user's completed requests.

    .venv/bin/python bench/product.py                         # about 7 minutes
    .venv/bin/python bench/product.py --quick --ways fifo,defaults
    .venv/bin/python bench/product.py --quick --json
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import json
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import httpx
from loadgen import (
    MODEL,
    add_engine_arguments,
    add_flood_arguments,
    answer_sha,
    client,
    configure_gateway,
    counters,
    fmt,
    gateway_counts,
    ge,
    generated_tokens,
    has_text,
    headers,
    jain,
    le,
    lt,
    percentile,
    power_lengths,
    ratio,
    simulator_args,
)

from llmserver.testing.processes import Database, GatewayProcess, start_gateway
from scheduling.jobs import INTERACTIVE
from simulator.launcher import RunningSimulator, start_simulator
from simulator.protocol import chat_prompt, tokenize

WAYS = ("fifo", "priority", "defaults", "ideal")
GATEWAY_WAYS = ("defaults",)
POWER_PROMPT = "Summarise the following evaluation transcript in detail. " * 7
LIGHT_PROMPT = "What is the capital of France? Answer briefly. "
INPUT_WEIGHT, OUTPUT_WEIGHT = 1.0, 4.0  # the fair-share policy's defaults (tokens unit)
CLASSES = ("light", "power", "heavy", "batch")


@dataclass(frozen=True)
class Shape:
    """A closed-loop user: its tier in the gateway ways and the weight it is judged by."""

    user: str
    tier: str
    words: int
    max_tokens: int
    weight: float
    outstanding: int


HEAVY = (
    Shape("A", "heavy", 400, 30, 1.0, 24),
    Shape("B", "heavy2", 20, 200, 2.0, 24),
    Shape("C", "heavy", 120, 100, 1.0, 24),
)
BATCH = Shape("batch", "batch", 100, 100, 1.0, 8)


@dataclass
class Result:
    """One streamed request; times in seconds from the run's start."""

    cls: str
    user: str
    max_tokens: int
    prompt: str
    sent: float = 0.0
    ttft: float | None = None
    e2e: float | None = None
    chunks: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    text_sha: str | None = None
    error: str | None = None

    @property
    def done(self) -> bool:
        return self.error is None and self.e2e is not None

    @property
    def finished_at(self) -> float | None:
        return self.sent + self.e2e if self.e2e is not None else None

    @property
    def intact(self) -> bool:
        return self.chunks == self.max_tokens and self.text_sha == answer_sha(self.max_tokens)

    def service(self) -> float:
        """Its cost in the tokens unit: usage's prompt tokens (the simulator's count if the
        usage chunk is missing) and the text chunks the client received."""
        prompt = self.prompt_tokens
        if prompt is None:
            prompt = len(tokenize(chat_prompt([{"role": "user", "content": self.prompt}])))
        return INPUT_WEIGHT * prompt + OUTPUT_WEIGHT * self.chunks


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--duration", type=float, default=60.0, help="Light users send for this long.")
    add_flood_arguments(p)
    p.add_argument("--light-users", type=int, default=5)
    p.add_argument("--light-interval", type=float, default=4.0)
    p.add_argument("--light-max-tokens", type=int, default=32)
    p.add_argument("--light-delay", type=float, default=1.0, help="Light users start after this.")
    add_engine_arguments(p)
    p.add_argument(
        "--drain-timeout",
        type=float,
        default=180.0,
        help="After the window, wait at most this long for the open streams; the rest count "
        "as errors (unfinished).",
    )
    p.add_argument("--ways", default="", help="Comma-separated subset of the ways to run.")
    p.add_argument("--quick", action="store_true", help="20 s of light load.")
    p.add_argument("--json", action="store_true", help="Print JSON instead of the tables.")
    args = p.parse_args(argv)
    if args.quick:
        args.duration = 20.0
    return args


def chosen_ways(args: argparse.Namespace) -> list[str]:
    if not args.ways:
        return list(WAYS)
    ways = [w.strip() for w in args.ways.split(",") if w.strip()]
    unknown = set(ways) - set(WAYS)
    if unknown:
        raise SystemExit(f"unknown ways: {sorted(unknown)}")
    return ways


# the load ---------------------------------------------------------------------------------


@dataclass
class Target:
    """Where requests go: the gateway (one URL, keys) or the simulators in turn (no keys)."""

    urls: Iterator[str]
    keys: dict[str, str] | None
    priorities: tuple[int, int] | None  # (light, everyone else), vLLM priority mode

    def url(self) -> str:
        return next(self.urls) + "/v1/chat/completions"

    def key(self, user: str) -> str | None:
        return self.keys[user] if self.keys else None

    def priority(self, cls: str) -> int | None:
        if self.priorities is None:
            return None
        return self.priorities[0] if cls == "light" else self.priorities[1]


def request_body(result: Result, priority: int | None) -> dict[str, Any]:
    data: dict[str, Any] = {
        "model": MODEL,
        "messages": [{"role": "user", "content": result.prompt}],
        "max_tokens": result.max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if priority is not None:
        data["priority"] = priority
    return data


async def stream(http: httpx.AsyncClient, target: Target, result: Result, t0: float) -> Result:
    """POST one streaming completion: TTFT at the first chunk with text; the text's sha1, the
    text chunks and the final usage chunk's counts."""
    start = time.monotonic()
    result.sent = start - t0
    data = request_body(result, target.priority(result.cls))
    try:
        async with http.stream(
            "POST", target.url(), json=data, headers=headers(target.key(result.user))
        ) as response:
            if response.status_code != 200:
                await response.aread()
                result.error = f"{response.status_code} {response.text[:120]}"
                return result
            text = hashlib.sha1()
            async for line in response.aiter_lines():
                if not line.startswith("data: {"):
                    continue
                payload = json.loads(line[6:])
                if payload.get("usage"):
                    result.prompt_tokens = payload["usage"].get("prompt_tokens")
                    result.completion_tokens = payload["usage"].get("completion_tokens")
                if "error" in payload:
                    result.error = f"in-stream error {str(payload['error'])[:120]}"
                if has_text(line):
                    if result.ttft is None:
                        result.ttft = time.monotonic() - start
                    result.chunks += 1
                    for choice in payload.get("choices", []):
                        text.update((choice.get("delta", {}).get("content") or "").encode())
        if result.error is None:
            result.e2e = time.monotonic() - start
            result.text_sha = text.hexdigest()
    except (httpx.HTTPError, ValueError) as exc:
        result.error = repr(exc)[:160]
    return result


async def light_user(
    http: httpx.AsyncClient, target: Target, user: str, index: int, args: argparse.Namespace,
    t0: float, results: list[Result], tasks: list[asyncio.Task[Result]],
) -> None:  # fmt: skip
    """Open loop: one request every interval, staggered, whatever is still outstanding."""
    offset = args.light_delay + index * args.light_interval / max(args.light_users, 1)
    end = args.light_delay + args.duration
    for k in itertools.count():
        at = offset + k * args.light_interval
        if at >= end:
            return
        await asyncio.sleep(max(0.0, t0 + at - time.monotonic()))
        result = Result("light", user, args.light_max_tokens, f"[{user} #{k}] " + LIGHT_PROMPT)
        results.append(result)
        tasks.append(asyncio.ensure_future(stream(http, target, result, t0)))


async def closed_loop(
    http: httpx.AsyncClient, target: Target, shape: Shape, cls: str, loop: int, until: float,
    t0: float, results: list[Result],
) -> None:  # fmt: skip
    """One of a user's outstanding streams: send, and on the end of the answer send again,
    until the window ends."""
    for k in itertools.count():
        if time.monotonic() >= until:
            return
        prompt = f"[{shape.user} #{loop}.{k}] " + "word " * shape.words
        result = Result(cls, shape.user, shape.max_tokens, prompt)
        results.append(result)
        await stream(http, target, result, t0)
        if result.error is not None:
            await asyncio.sleep(0.05)  # a refusal: do not spin


async def sample_backends(
    http: httpx.AsyncClient, sims: list[str], t0: float, samples: list[tuple[float, float]]
) -> None:
    """(time, generated tokens summed over the simulators) every 0.2 s."""
    while True:
        values = await asyncio.gather(*(counters(http, s) for s in sims), return_exceptions=True)
        read = [v for v in values if not isinstance(v, BaseException)]
        if len(read) == len(sims):  # a failed scrape is skipped, not counted as 0
            samples.append((time.monotonic() - t0, sum(generated_tokens(v) for v in read)))
        await asyncio.sleep(0.2)


async def run_load(
    target: Target, sims: list[str], args: argparse.Namespace, everyone: bool
) -> dict[str, Any]:
    """Drive one way's load (the light users alone unless `everyone`); the requests, the
    backends' token samples and the window."""
    window = (args.light_delay, args.light_delay + args.duration)
    results: list[Result] = []
    tasks: list[asyncio.Task[Any]] = []
    samples: list[tuple[float, float]] = []
    async with client() as http:
        t0 = time.monotonic()
        sampler = asyncio.ensure_future(sample_backends(http, sims, t0, samples))
        if everyone:
            for i, length in enumerate(power_lengths(args)):
                result = Result("power", "power", length, f"[power #{i}] " + POWER_PROMPT)
                results.append(result)
                tasks.append(asyncio.ensure_future(stream(http, target, result, t0)))
            for shape, cls in [(s, "heavy") for s in HEAVY] + [(BATCH, "batch")]:
                for loop in range(shape.outstanding):
                    coro = closed_loop(http, target, shape, cls, loop, t0 + window[1], t0, results)
                    tasks.append(asyncio.ensure_future(coro))
        users = [f"light{i + 1}" for i in range(args.light_users)]
        await asyncio.gather(
            *(light_user(http, target, u, i, args, t0, results, tasks) for i, u in enumerate(users))
        )
        await asyncio.sleep(max(0.0, t0 + window[1] - time.monotonic()))
        _, pending = await asyncio.wait(tasks, timeout=args.drain_timeout) if tasks else ((), ())
        for task in pending:
            task.cancel()
        await asyncio.gather(*pending, return_exceptions=True)
        wall = time.monotonic() - t0
        sampler.cancel()
        await asyncio.gather(sampler, return_exceptions=True)
    for result in results:
        if result.error is None and result.e2e is None:
            result.error = f"unfinished {args.drain_timeout:g} s after the window"
    return {"results": results, "samples": samples, "window": window, "wall": wall}


# the ways ---------------------------------------------------------------------------------


def gateway_spec(
    args: argparse.Namespace,
) -> tuple[dict[str, dict[str, Any]], list[tuple[str, str, str]]]:
    """Tiers and keys for the defaults way: only the per-user limits raised, and the two heavy
    tiers' weights and band."""
    limits = {
        "max_concurrent_per_user": 64,
        "max_queued_per_user": max(1000, args.power_requests * 2),
        "queue_timeout_seconds": 3600.0,
    }
    tiers: dict[str, dict[str, Any]] = {"interactive": dict(limits), "batch": dict(limits)}
    for shape in HEAVY:
        tiers[shape.tier] = {"weight": shape.weight, "band": INTERACTIVE, **limits}
    keys = [("power", "interactive", "chat")]
    keys += [(f"light{i + 1}", "interactive", "chat") for i in range(args.light_users)]
    keys += [(s.user, s.tier, "chat") for s in HEAVY] + [(BATCH.user, BATCH.tier, "batch")]
    return tiers, keys


async def run_way(way: str, args: argparse.Namespace) -> dict[str, Any]:
    policy = "priority" if way == "priority" else "fcfs"
    sims: list[RunningSimulator] = []
    gw: GatewayProcess | None = None
    db: Database | None = None
    tmp = tempfile.TemporaryDirectory(prefix="bench-product-")
    try:
        for _ in range(2):
            sims.append(start_simulator(*simulator_args(args, policy), quiet=True))
        sim_urls = [s.url for s in sims]
        if way in GATEWAY_WAYS:
            db = Database(Path(tmp.name))
            second = ("add_backend", "simulator2", sim_urls[1], "--model", MODEL)
            gw = start_gateway(db.url, sim_urls[0], quiet=True, setup=[second])
            tiers, key_specs = gateway_spec(args)
            keys = configure_gateway(gw, tiers, key_specs)
            target = Target(itertools.repeat(gw.url), keys, None)
            run = await run_load(target, sim_urls, args, True)
            run["gateway"] = await gateway_counts(gw.url)
        else:
            priorities = (0, 1) if way == "priority" else None
            target = Target(itertools.cycle(sim_urls), None, priorities)
            run = await run_load(target, sim_urls, args, way != "ideal")
    finally:
        if gw is not None:
            gw.stop()
        if db is not None:
            db.drop()
        for sim in sims:
            sim.stop()
        tmp.cleanup()
    return summarise(way, run)


# the figures ------------------------------------------------------------------------------


def steady_rate(samples: list[tuple[float, float]], window: tuple[float, float]) -> float | None:
    """Generated tokens/s between the samples nearest the window's ends."""
    inside = [s for s in samples if window[0] <= s[0] <= window[1]]
    if len(inside) < 2 or inside[-1][0] <= inside[0][0]:
        return None
    return (inside[-1][1] - inside[0][1]) / (inside[-1][0] - inside[0][0])


def summarise(way: str, run: dict[str, Any]) -> dict[str, Any]:
    results: list[Result] = run["results"]
    w0, w1 = run["window"]
    out: dict[str, Any] = {"way": way, "wall_seconds": run["wall"]}
    for cls in CLASSES:
        mine = [r for r in results if r.cls == cls]
        done = [r for r in mine if r.done]
        errors = [r.error for r in mine if r.error]
        out[cls] = {
            "requests": len(mine),
            "completed": len(done),
            "completed_in_window": sum(1 for r in done if w0 <= (r.finished_at or -1) <= w1),
            "intact": sum(1 for r in done if r.intact),
            "errors": len(errors),
            "refused_429": sum(1 for e in errors if e.startswith("429")),
            "error_examples": sorted(set(errors))[:3],
        }
    ttfts = [
        r.ttft for r in results if r.cls == "light" and r.ttft is not None and w0 <= r.sent <= w1
    ]
    out["light"]["ttft"] = {f"p{q}": percentile(ttfts, q) for q in (50, 95, 99)} | {
        "max": max(ttfts) if ttfts else None
    }
    out["light_timeline"] = sorted(
        (round(r.sent, 3), round(r.ttft, 3)) for r in results if r.cls == "light" and r.ttft
    )
    service = {
        s.user: sum(
            r.service()
            for r in results
            if r.user == s.user and r.done and w0 <= (r.finished_at or -1) <= w1
        )
        for s in HEAVY
    }
    total = sum(service.values())
    shares = {u: v / total if total else 0.0 for u, v in service.items()}
    out["heavy_service"] = service
    out["heavy_shares"] = shares
    out["heavy_jain"] = jain([shares[s.user] / s.weight for s in HEAVY]) if total else None
    out["tokens_per_second"] = steady_rate(run["samples"], run["window"])
    gateway = run.get("gateway")
    if gateway is not None:
        recalls = gateway.get("preempted_recalled", 0.0)
        evictions = sum(v for k, v in gateway.items() if k.startswith("preempted_")) - recalls
        completed = sum(out[c]["completed"] for c in CLASSES)
        lights = out["light"]["requests"]
        out["evictions"] = evictions
        out["recalls"] = recalls
        out["evictions_per_light_request"] = evictions / lights if lights else None
        out["evictions_per_completed_request"] = evictions / completed if completed else None
    else:
        out["evictions"] = out["evictions_per_light_request"] = None
        out["evictions_per_completed_request"] = None
    out["requests"] = [asdict(r) for r in results]
    return out


def targets(results: dict[str, dict[str, Any]]) -> list[tuple[str, str, bool | None]]:
    """(target, measured, met) for each gateway way that ran."""
    checks: list[tuple[str, str, bool | None]] = []
    fifo, prio = results.get("fifo"), results.get("priority")
    for way in GATEWAY_WAYS:
        r = results.get(way)
        if r is None:
            continue
        p50, p99 = r["light"]["ttft"]["p50"], r["light"]["ttft"]["p99"]
        checks.append((f"{way}: light TTFT p99 < 0.3 s", f"{fmt(p99, 1, 3)} s", lt(p99, 0.3)))
        if prio is not None:
            other = prio["light"]["ttft"]["p99"]
            quarter = other / 4 if other is not None else None
            checks.append(
                (
                    f"{way}: light TTFT p99 < 1/4 of vLLM priority mode's",
                    f"{fmt(p99, 1, 3)} s vs {fmt(quarter, 1, 3)} s (priority's {fmt(other)} s)",
                    lt(p99, quarter),
                )
            )
        checks.append((f"{way}: light TTFT p50 < 0.25 s", f"{fmt(p50, 1, 3)} s", lt(p50, 0.25)))
        if fifo is not None:
            vs_fifo = ratio(r["tokens_per_second"], fifo["tokens_per_second"])
            checks.append(
                (
                    f"{way}: generated tokens/s >= 98% of FIFO's",
                    f"{fmt(vs_fifo, 100, 1)}% ({fmt(r['tokens_per_second'], 1, 0)} vs "
                    f"{fmt(fifo['tokens_per_second'], 1, 0)})",
                    ge(vs_fifo, 0.98),
                )
            )
        shares = " / ".join(f"{s.user} {fmt(r['heavy_shares'][s.user], 100, 1)}%" for s in HEAVY)
        checks.append(
            (
                f"{way}: Jain over heavy service / weight >= 0.99",
                f"{fmt(r['heavy_jain'], 1, 3)} ({shares}; weights 1/2/1)"
                if r["heavy_jain"] is not None
                else "no heavy request completed in the window",
                ge(r["heavy_jain"], 0.99),
            )
        )
        checks.append(
            (
                f"{way}: evictions per completed request <= 0.05",
                f"{fmt(r['evictions_per_completed_request'], 1, 3)} ({r['evictions']:g} evictions)"
                if r["evictions"] is not None
                else "-",
                le(r["evictions_per_completed_request"], 0.05),
            )
        )
        checks.append(
            (
                f"{way}: evictions per light request <= 1",
                fmt(r["evictions_per_light_request"], 1, 2),
                le(r["evictions_per_light_request"], 1.0),
            )
        )
        intact = sum(r[c]["intact"] for c in CLASSES)
        done = sum(r[c]["completed"] for c in CLASSES)
        per_class = ", ".join(f"{c} {r[c]['intact']}/{r[c]['completed']}" for c in CLASSES)
        checks.append(
            (f"{way}: every stream whole", f"{intact} of {done} ({per_class})", intact == done)
        )
        errors = sum(r[c]["errors"] for c in CLASSES)
        refused = sum(r[c]["refused_429"] for c in CLASSES)
        checks.append((f"{way}: no errors", f"{errors} ({refused} of them 429)", errors == 0))
        batch = r["batch"]
        checks.append(
            (
                f"{way}: the batch user gets something",
                f"{batch['completed_in_window']} in the window, {batch['completed']} in the run",
                batch["completed"] > 0,
            )
        )
    return checks


def table(results: dict[str, dict[str, Any]]) -> str:
    fifo_rate = results.get("fifo", {}).get("tokens_per_second")
    lines = [
        "| way | light TTFT p50 / p95 / p99 (s) | heavy shares A / B / C | Jain (share/weight) "
        "| tokens/s (vs FIFO) | evictions (per light / per completed) "
        "| streams intact light / power / heavy / batch "
        "| completed in window / run: power, heavy, batch "
        "| errors light / power / heavy / batch (429s) |",
        "|" + "---|" * 9,
    ]
    for way, r in results.items():
        t = r["light"]["ttft"]
        shares = " / ".join(fmt(r["heavy_shares"][s.user], 100, 1) + "%" for s in HEAVY)
        rate = r["tokens_per_second"]
        vs_fifo = ratio(rate, fifo_rate)
        evictions = (
            "-"
            if r["evictions"] is None
            else f"{r['evictions']:g} ({fmt(r['evictions_per_light_request'], 1, 2)} / "
            f"{fmt(r['evictions_per_completed_request'], 1, 3)}); {r['recalls']:g} called back"
        )
        intact = " / ".join(f"{r[c]['intact']}/{r[c]['completed']}" for c in CLASSES)
        done = ", ".join(
            f"{r[c]['completed_in_window']} / {r[c]['completed']}"
            for c in ("power", "heavy", "batch")
        )
        errors = " / ".join(str(r[c]["errors"]) for c in CLASSES)
        refused = sum(r[c]["refused_429"] for c in CLASSES)
        lines.append(
            f"| {way} | {fmt(t['p50'], 1, 3)} / {fmt(t['p95'], 1, 3)} / {fmt(t['p99'], 1, 3)} "
            f"| {shares} | {fmt(r['heavy_jain'], 1, 3)} "
            f"| {fmt(rate, 1, 0)} ({fmt(vs_fifo, 100, 1)}%) | {evictions} | {intact} "
            f"| {done} "
            f"| {errors} ({refused}) |"
        )
    checks = targets(results)
    if checks:
        lines += ["", "| target | measured | met |", "|---|---|---|"]
        for name, measured, met in checks:
            lines.append(
                f"| {name} | {measured} | {'-' if met is None else ('yes' if met else 'NO')} |"
            )
    examples = [
        f"{way} {c}: {e}"
        for way, r in results.items()
        for c in CLASSES
        for e in r[c]["error_examples"]
    ]
    if examples:
        lines += ["", "Errors seen:", *(f"- {e}" for e in examples)]
    return "\n".join(lines)


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results: dict[str, dict[str, Any]] = {}
    for way in chosen_ways(args):
        print(f"running {way} ...", file=sys.stderr, flush=True)
        results[way] = await run_way(way, args)
    if args.json:
        slim = {w: {k: v for k, v in r.items() if k != "requests"} for w, r in results.items()}
        checks = [{"target": t, "measured": m, "met": ok} for t, m, ok in targets(results)]
        print(json.dumps({"settings": vars(args), "results": slim, "targets": checks}, indent=2))
    else:
        print(table(results))
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
