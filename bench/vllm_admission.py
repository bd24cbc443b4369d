"""What it costs a request to enter a busy vLLM: the floor under any scheduler in front of it.

A scheduler in front of the engine sends a light user's request when a slot is free; the engine's
own FIFO or priority mode holds it in its queue from the start. Either way the request must pass
vLLM's front end (the API server process: chat template, tokenizer, hand-off to the engine core
over ZMQ) and wait for the engine's next step. On vLLM's CPU build that front end shares the
machine's cores with an engine core whose torch threads want all of them, so a request that
arrives while streams are decoding may spend longer there than in the engine.

One vLLM (CPU build, SmolLM2-135M, `--max-num-seqs 4`, as `make vllm` installs it). For each
`--busy` level (streams already decoding, of max_tokens 400, until the probe is done), `--trials`
times: one light request (the floods' "Say hello.", max_tokens 16), streamed, alone in the
window. Reported per level, medians: its time to first token as the client sees it; vLLM's own
view of it from its histograms (`vllm:time_to_first_token_seconds`, from the request's arrival
in the engine's input processor; `vllm:request_queue_time_seconds`, waiting for a slot;
`vllm:request_prefill_time_seconds`, its prefill); and what is left of the client's time, the
front end and the HTTP round trip. With every slot free but these, the queue is a step at most.

    .venv/bin/python bench/vllm_admission.py                 # about 2 minutes
    .venv/bin/python bench/vllm_admission.py --busy 0,1,3 --json
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import sys
import time
from typing import Any

import httpx
from vllm_resume import median, stream

from llmserver.testing.vllm_server import SERVED_NAME, VllmServer, missing, start_vllm

LIGHT = "Say hello."
BACKGROUND = "Write a long story about a lighthouse keeper."
# vLLM's histograms of one request, read as the change of their sums around it.
HISTOGRAMS = {
    "engine_ttft": "vllm:time_to_first_token_seconds_sum",
    "queue": "vllm:request_queue_time_seconds_sum",
    "prefill": "vllm:request_prefill_time_seconds_sum",
}


def body(prompt: str, max_tokens: int) -> dict[str, Any]:
    return {
        "model": SERVED_NAME,
        "messages": [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": True,
    }


async def until_running(vllm: VllmServer, n: int, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while (await asyncio.to_thread(vllm.metrics)).get("vllm:num_requests_running", 0.0) != n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"vLLM never ran {n} requests")
        await asyncio.sleep(0.05)


async def trial(vllm: VllmServer, http: httpx.AsyncClient, busy: int, i: int
                ) -> dict[str, float | None]:  # fmt: skip
    """One light request beside `busy` decoding streams."""
    background = [
        asyncio.ensure_future(stream(http, vllm.url, body(f"[{i}.{k}] {BACKGROUND}", 400), None))
        for k in range(busy)
    ]
    try:
        await until_running(vllm, busy)
        await asyncio.sleep(0.5)  # their prefills done: they decode
        before = await asyncio.to_thread(vllm.metrics)
        _text, ttft, _ = await stream(http, vllm.url, body(f"[{i}] {LIGHT}", 16), None)
        await asyncio.sleep(0.3)  # the finished request's stats reach /metrics
        after = await asyncio.to_thread(vllm.metrics)
    finally:
        for task in background:
            task.cancel()
        for task in background:
            with contextlib.suppress(asyncio.CancelledError, httpx.HTTPError):
                await task
    out: dict[str, float | None] = {"client_ttft": ttft}
    for key, name in HISTOGRAMS.items():
        out[key] = after.get(name, 0.0) - before.get(name, 0.0)
    engine = out["engine_ttft"]
    out["front_end"] = None if ttft is None or engine is None else ttft - engine
    return out


async def run_level(vllm: VllmServer, http: httpx.AsyncClient, busy: int, trials: int
                    ) -> dict[str, Any]:  # fmt: skip
    await until_running(vllm, 0)
    await trial(vllm, http, busy, -1)  # warm-up, not counted
    results = []
    for i in range(trials):
        await until_running(vllm, 0)
        results.append(await trial(vllm, http, busy, i))
    keys = ("client_ttft", *HISTOGRAMS, "front_end")
    return {"busy": busy, **{k: median([r[k] for r in results]) for k in keys}}


def table(results: list[dict[str, Any]]) -> str:
    rows = [
        "| streams decoding | client TTFT | vLLM's TTFT (from its input processor) | of it: queue "
        "| of it: prefill | front end and round trip (client less vLLM's) |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        cells = [f"{r[k] * 1000:.0f} ms" if r[k] is not None else "-" for k in
                 ("client_ttft", "engine_ttft", "queue", "prefill", "front_end")]  # fmt: skip
        rows.append(f"| {r['busy']} | " + " | ".join(cells) + " |")
    return "\n".join(rows)


async def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--busy", default="0,3", help="comma-separated: streams decoding beside it")
    p.add_argument("--trials", type=int, default=7)
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    reason = missing()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    vllm = start_vllm(4)
    try:
        async with httpx.AsyncClient(timeout=120) as http:
            results = [
                await run_level(vllm, http, int(b), args.trials) for b in args.busy.split(",")
            ]
    finally:
        vllm.stop()
    print(json.dumps(results, indent=2) if args.json else table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
