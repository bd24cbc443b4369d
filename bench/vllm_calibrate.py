"""The simulator fitted to the real vLLM: its step and prefill timings, and the flood's figures.

On the real vLLM (CPU build, SmolLM2-135M, `--max-num-seqs 4`, as `make vllm` installs it and
bench/vllm_flood.py runs it):

  steps     n streams of the flood's power prompt at once (n = 1 .. slots, `ignore_eos`, 64
            tokens): the median time between two tokens of a stream, seen by the client
  prefill   each of the flood's prompts alone (3 times, one token), and the continuation of a
            power stream paused after 40 tokens as the gateway sends it: vLLM's own prefill
            time (`vllm:request_prefill_time_seconds`, first scheduled to first token: the step
            that computes the prompt) and the tokens it computed
  flood     bench/vllm_flood.py's `direct` (fcfs) way once and its `priority` way
            `--priority-runs` times (default 3): per run, light TTFT p50 / p99, the power user's
            makespan, and the tokens the engine generated for each request in the order sent
            (the model ends some before max_tokens with its end-of-sequence token; the test
            replays those lengths). The priority mode's light median is a chaotic figure: a light
            request waits for whichever stream ends next, so a shift of one step in the streams'
            phases moves it; over five runs it ranged 0.57-1.17 s. Hence several runs.

The fit, in the simulator's cost model (`simulator/engine.py`: a step takes base + per_seq x
running + prefill x prompt tokens computed): base and per_seq by least squares over the steps;
the prefill per token by least squares over the three prefills, each counted in the
simulator's own tokens (`simulator.protocol.tokenize` of its chat template, which renders no
system preamble where SmolLM2's adds one). Everything goes to
`tests/backends/fixtures/vllm_cpu_calibration.json`, which
`tests/backends/test_simulator_calibration.py` holds the simulator to.

    .venv/bin/python bench/vllm_calibrate.py            # about 9 minutes on two cores
    .venv/bin/python bench/vllm_calibrate.py --refit    # the recorded timings fitted again
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import statistics
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
from realengine_flood import (
    LIGHT_PROMPT,
    MARKS,
    POWER_PROMPT,
    parse_args,
    run_load,
    summarise,
    wait_idle,
)
from vllm_resume import stream

from llmserver.pipeline.resume import continuation_body
from llmserver.testing.vllm_build import VLLM_VERSION
from llmserver.testing.vllm_server import SERVED_NAME, VllmServer, missing, start_vllm
from simulator.protocol import chat_prompt, tokenize

FIXTURE = (
    Path(__file__).resolve().parent.parent / "tests/backends/fixtures/vllm_cpu_calibration.json"
)
COMMAND = ".venv/bin/python bench/vllm_calibrate.py"
RESUMED_AFTER = 40  # tokens a paused stream had delivered


def messages(prompt: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": prompt}]


async def gaps(http: httpx.AsyncClient, url: str, i: int) -> list[float]:
    """The times between the tokens of one 64-token stream."""
    body = {"model": SERVED_NAME, "messages": messages(f"[#{i}] {POWER_PROMPT}"),
            "max_tokens": 64, "ignore_eos": True, "stream": True}  # fmt: skip
    stamps: list[float] = []
    async with http.stream("POST", url + "/v1/chat/completions", json=body) as response:
        async for line in response.aiter_lines():
            if line.startswith("data: {") and '"content":"' in line.replace(" ", ""):
                stamps.append(time.monotonic())
    return [b - a for a, b in itertools.pairwise(stamps)]


async def step_seconds(vllm: VllmServer, slots: int) -> dict[int, float]:
    """Running streams -> the median time between two tokens of one."""
    out: dict[int, float] = {}
    async with httpx.AsyncClient(timeout=120) as http:
        await gaps(http, vllm.url, -1)  # warm-up
        for n in range(1, slots + 1):
            runs = await asyncio.gather(*(gaps(http, vllm.url, 100 * n + i) for i in range(n)))
            # The middle of the streams, where all n run together.
            out[n] = statistics.median(g for run in runs for g in run[8:-8])
    return out


async def prefill(vllm: VllmServer, prompt: str, resumed: bool = False) -> dict[str, float]:
    """vLLM's own prefill time and tokens computed for `prompt` alone, over three requests;
    `resumed`: for the continuation of `prompt` paused after RESUMED_AFTER tokens, as the
    gateway sends it (`llmserver.pipeline.resume.continuation_body`)."""
    bodies = []
    async with httpx.AsyncClient(timeout=60) as http:
        for i in range(3):
            body = {"model": SERVED_NAME, "messages": messages(prompt.format(i=i)), "max_tokens": 1}
            if resumed:
                body = await paused(http, vllm.url, body)
            bodies.append(body)
        before = vllm.metrics()
        for body in bodies:
            (await http.post(vllm.url + "/v1/chat/completions", json=body)).raise_for_status()
        await asyncio.sleep(0.5)
        tokenized = {k: bodies[0][k] for k in bodies[0] if k != "max_tokens"}
        count = await http.post(vllm.url + "/tokenize", json=tokenized)
    after = vllm.metrics()

    def delta(name: str) -> float:
        return after[name] - before[name]

    n = delta("vllm:request_prefill_time_seconds_count")
    template = chat_prompt(bodies[0]["messages"], not resumed)
    return {
        "seconds": delta("vllm:request_prefill_time_seconds_sum") / n,
        "computed_tokens": delta("vllm:request_prefill_kv_computed_tokens_sum") / n,
        "engine_tokens": float(count.json()["count"]),
        "simulator_tokens": float(len(tokenize(template))),
    }


async def paused(http: httpx.AsyncClient, url: str, body: dict[str, Any]) -> dict[str, Any]:
    """The continuation of `body` after RESUMED_AFTER tokens (its stream then closed)."""
    streamed = {**body, "max_tokens": 64, "ignore_eos": True, "stream": True}
    text, _, _ = await stream(http, url, streamed, RESUMED_AFTER)
    await asyncio.sleep(0.3)
    return continuation_body(body, text, RESUMED_AFTER)


def fit(steps: dict[int, float], prefills: dict[str, dict[str, float]]) -> dict[str, float]:
    """The simulator's base_step_ms, per_seq_ms, prefill_step_ms and prefill_ms_per_token: the
    decode step's line by least squares; then the prefill's line by least squares over every
    prefill measured (the flood's prompts and a resume), each a step of one running sequence
    plus its prompt in the simulator's tokens. A prefill step costs vLLM more than a decode step
    beyond its tokens, and the simulator's template renders fewer tokens than SmolLM2's (no
    system preamble): the line's intercept holds both, so a fresh prefill and a resume's
    re-prefill both land near the engine's."""
    ns, ys = list(steps), [steps[n] * 1000 for n in steps]
    per_seq, base = statistics.linear_regression(ns, ys)
    tokens = [p["simulator_tokens"] for p in prefills.values()]
    beyond = [p["seconds"] * 1000 - base - per_seq for p in prefills.values()]
    prefill, fixed = statistics.linear_regression(tokens, beyond)
    return {
        "base_step_ms": base,
        "per_seq_ms": per_seq,
        "prefill_step_ms": max(0.0, fixed),
        "prefill_ms_per_token": max(0.0, prefill),
    }


async def flood(way: str, args: Any) -> dict[str, Any]:
    vllm = start_vllm(
        args.slots, options=["--scheduling-policy", "priority" if way == "priority" else "fcfs"]
    )
    try:
        await wait_idle(vllm)
        marks = MARKS if way == "priority" else None
        outcomes, wall, trace = await run_load(vllm.url, args, None, True, SERVED_NAME, marks)
    finally:
        vllm.stop()
    r = summarise(way, outcomes, wall, args.slots, trace)
    ordered = sorted(outcomes, key=lambda o: o.sent)
    return {
        "light_ttft_p50": r["light"]["ttft_p50"],
        "light_ttft_p99": r["light"]["ttft_p99"],
        "power_makespan": r["power"]["makespan"],
        "tokens": {
            cls: [o.completion_tokens for o in ordered if o.cls == cls]
            for cls in ("power", "light")
        },
    }


def options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--priority-runs", type=int, default=3)
    p.add_argument(
        "--refit",
        action="store_true",
        help="fit the recorded timings again (after a change to the fit), without an engine",
    )


async def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv, ("direct", "priority"), __doc__, options)
    if args.refit:
        record = json.loads(FIXTURE.read_text())
        steps = {int(n): s for n, s in record["steps_seconds"].items()}
        record["fit"] = fit(steps, record["prefill"])
        FIXTURE.write_text(json.dumps(record, indent=2) + "\n")
        print(json.dumps(record["fit"], indent=2))
        return 0
    reason = missing()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    vllm = start_vllm(args.slots)
    try:
        steps = await step_seconds(vllm, args.slots)
        prefills = {
            "power": await prefill(vllm, "[#{i}] " + POWER_PROMPT),
            "light": await prefill(vllm, "[light1 #{i}] " + LIGHT_PROMPT),
            "resume": await prefill(vllm, "[resumed #{i}] " + POWER_PROMPT, resumed=True),
        }
    finally:
        vllm.stop()
    record = {
        "command": COMMAND,
        "recorded": datetime.now(UTC).isoformat(timespec="seconds"),
        "engine": f"vllm-cpu {VLLM_VERSION}, SmolLM2-135M-Instruct float32, --max-num-seqs "
        f"{args.slots}, --enforce-eager",
        "load": {k: getattr(args, k) for k in ("slots", "power_requests", "power_max_tokens",
                 "light_users", "light_interval", "light_max_tokens", "duration", "light_delay")},
        "steps_seconds": {str(n): s for n, s in steps.items()},
        "prefill": prefills,
        "fit": fit(steps, prefills),
        "flood": {
            "direct": [await flood("direct", args)],
            "priority": [await flood("priority", args) for _ in range(args.priority_runs)],
        },
    }  # fmt: skip
    FIXTURE.write_text(json.dumps(record, indent=2) + "\n")
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
