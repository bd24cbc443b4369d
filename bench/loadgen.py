"""Shared pieces of the gateway benchmarks: the load client, percentiles and process set-up.

One asyncio process drives every request with one `httpx.AsyncClient` whose pool limits are set
far above the load, so the client never queues requests itself. Everything runs on 127.0.0.1.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import json
import math
import random
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from llmserver.backends.metrics import parse_samples  # prometheus-client's parser
from llmserver.testing.processes import Database, GatewayProcess, start_gateway
from simulator.launcher import RunningSimulator, start_simulator
from simulator.protocol import token_text

MODEL = "demo-llama"


def client(connections: int = 2048, timeout: float = 600.0) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        limits=httpx.Limits(
            max_connections=connections,
            max_keepalive_connections=connections,
            keepalive_expiry=60.0,
        ),
        timeout=httpx.Timeout(timeout, connect=10.0, pool=timeout),
    )


def percentile(values: list[float], q: float) -> float | None:
    """Linear interpolation between closest ranks; None for no values."""
    if not values:
        return None
    ordered = sorted(values)
    rank = (len(ordered) - 1) * q / 100.0
    low, high = math.floor(rank), math.ceil(rank)
    return ordered[low] + (ordered[high] - ordered[low]) * (rank - low)


def body(
    prompt: str, max_tokens: int, stream: bool, priority: int | None = None, model: str = MODEL
) -> dict:
    data: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": stream,
    }
    if stream:
        data["stream_options"] = {"include_usage": True}
    if priority is not None:
        data["priority"] = priority
    return data


def headers(key: str | None) -> dict[str, str]:
    return {"authorization": f"Bearer {key}"} if key else {}


@dataclass
class Outcome:
    """One streamed request, times in seconds relative to the run's start."""

    cls: str
    user: str
    sent: float
    ttft: float | None = None
    e2e: float | None = None
    tokens: int = 0
    error: str | None = None
    # sha1 of the streamed text, to check a (resumed) stream word for word against the answer
    text_sha: str | None = None
    # The finish reason its last choice carried (None: the stream ended without one)
    finish_reason: str | None = None
    # Tokens generated, as the usage chunk at the stream's end counts them (a text chunk may
    # carry more than one token); None where none came
    completion_tokens: int | None = None


def has_text(line: str) -> bool:
    """A chunk with generated text: role-only chunks with empty content are not tokens."""
    return '"content"' in line and '"content":""' not in line and '"content": ""' not in line


async def stream_once(
    http: httpx.AsyncClient, url: str, key: str | None, data: dict, outcome: Outcome, t0: float
) -> Outcome:
    """POST a streaming completion; the first token is the first event carrying text."""
    start = time.monotonic()
    outcome.sent = start - t0
    try:
        async with http.stream("POST", url, json=data, headers=headers(key)) as response:
            if response.status_code != 200:
                await response.aread()
                outcome.error = f"{response.status_code} {response.text[:120]}"
                return outcome
            text = hashlib.sha1()
            async for line in response.aiter_lines():
                if line.startswith("data: {") and has_text(line):
                    if outcome.ttft is None:
                        outcome.ttft = time.monotonic() - start
                    outcome.tokens += 1
                    for choice in json.loads(line[6:]).get("choices", []):
                        text.update((choice.get("delta", {}).get("content") or "").encode())
                if line.startswith("data: {") and '"finish_reason":"' in line.replace(" ", ""):
                    for choice in json.loads(line[6:]).get("choices", []):
                        outcome.finish_reason = choice.get("finish_reason") or outcome.finish_reason
                if line.startswith("data: {") and '"error"' in line:
                    # An error inside a stream already answered 200 (a queue timeout after the
                    # headers went out, a backend that died mid-answer): the request failed.
                    error = json.loads(line[6:]).get("error")
                    if isinstance(error, dict):
                        outcome.error = f"in stream: {error.get('code') or error.get('message')}"
                if line.startswith("data: {") and '"usage":{' in line.replace(" ", ""):
                    usage = json.loads(line[6:]).get("usage") or {}
                    outcome.completion_tokens = usage.get("completion_tokens")
        outcome.e2e = time.monotonic() - start
        outcome.text_sha = text.hexdigest()
    except httpx.HTTPError as exc:
        outcome.error = repr(exc)[:160]
    return outcome


async def counters(http: httpx.AsyncClient, simulator_url: str) -> dict[str, float]:
    response = await http.get(simulator_url + "/metrics", headers={"accept": "text/plain"})
    return parse_samples(response.text)


async def gateway_counts(url: str) -> dict[str, float]:
    """The gateway's preemptions by kind (`preempted_<kind>`; `preempted_recalled` are jobs
    called back from an engine's queue, which are no evictions) and its preemption decisions by
    reason."""
    async with client() as http:
        text = (await http.get(url + "/metrics", headers={"accept": "text/plain"})).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == "llmserver_preemptions_total":
                key = f"preempted_{sample.labels['kind']}"
            elif sample.name == "llmserver_preemption_decisions_total":
                key = sample.labels["reason"]
            else:
                continue
            out[key] = out.get(key, 0.0) + sample.value
    return out


def generated_tokens(values: dict[str, float]) -> float:
    """The simulator's own counter, else vLLM's."""
    for name in ("simulator_generation_tokens_total", "vllm:generation_tokens_total"):
        if name in values:
            return values[name]
    return 0.0


def configure_gateway(
    gw: GatewayProcess,
    tiers: dict[str, dict[str, Any]],
    keys: list[tuple[str, str, str]],
    backends: dict[str, dict[str, Any]] | None = None,
    extra: dict[str, Any] | None = None,
) -> dict[str, str]:
    """Update tiers and backends and create keys in one `apply_config` call, before the
    gateway's first request (it loads its configuration then). `keys` holds (user, tier name,
    app type); `extra` may add `apply_config`'s routes, prices and policy. Returns user ->
    secret.
    """
    spec = {**(extra or {}), "tiers": tiers, "backends": backends or {}, "keys": keys}
    with tempfile.NamedTemporaryFile("w", suffix=".json") as f:
        json.dump(spec, f)
        f.flush()
        return json.loads(gw.manage("apply_config", f.name).strip().splitlines()[-1])


def fmt(value: float | None, scale: float = 1.0, digits: int = 2) -> str:
    return "-" if value is None else f"{value * scale:.{digits}f}"


def add_engine_arguments(p: argparse.ArgumentParser) -> None:
    """The simulated engine's flags that `simulator_args` passes on."""
    p.add_argument("--max-num-seqs", type=int, default=16)
    p.add_argument("--base-step-ms", type=float, default=15.0)
    p.add_argument("--per-seq-ms", type=float, default=0.6)
    p.add_argument("--prefill-ms-per-token", type=float, default=0.02)


def add_flood_arguments(p: argparse.ArgumentParser) -> None:
    """The power user's flood, as `power_lengths` reads it."""
    p.add_argument("--power-requests", type=int, default=200)
    p.add_argument("--power-max-tokens", type=int, default=200, help="Mean stream length.")
    p.add_argument(
        "--power-spread",
        type=float,
        default=0.5,
        help="Lengths are uniform in mean*(1 +- spread), seeded, the same in every way; "
        "0 makes every stream equal, so completions come in lockstep bursts of max_num_seqs.",
    )
    p.add_argument("--seed", type=int, default=7)


def simulator_args(args: argparse.Namespace, policy: str) -> list[str]:
    """A vLLM-like simulator with the flood benchmarks' engine: `--max-num-seqs`, its step
    timing flags from `args`, real time, the demo's model."""
    return [
        "--max-num-seqs",
        str(args.max_num_seqs),
        "--scheduling-policy",
        policy,
        "--base-step-ms",
        str(args.base_step_ms),
        "--per-seq-ms",
        str(args.per_seq_ms),
        "--prefill-ms-per-token",
        str(args.prefill_ms_per_token),
        "--speed",
        "1.0",
        "--model",
        MODEL,
    ]


def power_lengths(args: argparse.Namespace) -> list[int]:
    """The flood's answer lengths: seeded, uniform in mean*(1 +- spread), the same every way."""
    rng = random.Random(args.seed)
    low = max(1, round(args.power_max_tokens * (1 - args.power_spread)))
    high = max(low, round(args.power_max_tokens * (1 + args.power_spread)))
    return [rng.randint(low, high) for _ in range(args.power_requests)]


def answer_sha(tokens: int) -> str:
    """sha1 of the simulator's uninterrupted answer of `tokens` tokens (deterministic per
    position), to check a stream, resumed or not, word for word."""
    return hashlib.sha1("".join(token_text(i) for i in range(1, tokens + 1)).encode()).hexdigest()


def jain(values: list[float]) -> float | None:
    """Jain's fairness index: 1.0 when all are equal."""
    total, squares = sum(values), sum(v * v for v in values)
    return total * total / (len(values) * squares) if squares else None


def ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def lt(a: float | None, b: float | None) -> bool | None:
    """a < b, or None (unknown) where either is missing; likewise `le` and `ge`."""
    return None if a is None or b is None else a < b


def le(a: float | None, b: float | None) -> bool | None:
    return None if a is None or b is None else a <= b


def ge(a: float | None, b: float | None) -> bool | None:
    return None if a is None or b is None else a >= b


@dataclass
class Stage:
    """One way's simulator, and the gateway in front of it once `gateway()` starts one (on a
    database of its own, in a temporary folder); `stage()` stops and removes them all."""

    sim: RunningSimulator
    folder: Path
    _stops: list[Any] = field(default_factory=list)

    def gateway(self, env: dict[str, str] | None = None) -> GatewayProcess:
        db = Database(self.folder)
        self._stops.append(db.drop)
        gw = start_gateway(db.url, self.sim.url, env or {}, quiet=True)
        self._stops.append(gw.stop)
        return gw


@contextlib.contextmanager
def stage(model: str, max_num_seqs: int, speed: float) -> Iterator[Stage]:
    sim = start_simulator(
        "--max-num-seqs", str(max_num_seqs), "--model", model, "--speed", str(speed), quiet=True
    )
    with tempfile.TemporaryDirectory(prefix="bench-") as folder:
        way = Stage(sim, Path(folder))
        try:
            yield way
        finally:
            for stop in reversed(way._stops):
                stop()
            sim.stop()
