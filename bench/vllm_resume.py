"""What a paused stream's resume costs on the real vLLM: is its prompt found in the prefix cache?

The gateway pauses a stream by closing its upstream request (vLLM aborts it) and resumes it with
the original messages plus the text delivered, `continue_final_message` (the request the
gateway sends: `llmserver.pipeline.resume.continuation_body`). vLLM's prefix cache keeps only
full blocks (`vllm/v1/core/kv_cache_utils.py`, hashed per `block_size` tokens), and its CPU build
sets `block_size` to 128 unless told otherwise (`vllm/platforms/cpu.py`): a chat's prompt and
the tokens generated before a pause rarely fill one block there.

For each `--block-size` (None: the engine's own), one vLLM (CPU build, SmolLM2-135M, as
`make vllm` installs it) on an idle machine, `--trials` times:

  paused   a stream read for `--delivered` tokens, then closed (the gateway's pause)
  resume   its continuation, as the gateway sends it
  cold     the same continuation with another first word: nothing of it cached

Reported per block size: the medians of the resume's and the cold request's time to first
token, the prompt tokens the engine computed for each (`vllm:request_prefill_kv_computed_tokens`)
and the prefix cache hits (`vllm:prefix_cache_hits_total`), and the decode step of a lone stream
(what a smaller block may cost).

    .venv/bin/python bench/vllm_resume.py                       # about 3 minutes
    .venv/bin/python bench/vllm_resume.py --block-size default,32,16 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import time
from typing import Any

import httpx

from llmserver.pipeline.resume import continuation_body
from llmserver.testing.vllm_server import SERVED_NAME, VllmServer, missing, start_vllm

PROMPT = "Write a long story about a lighthouse keeper and the storm that changed her life."


async def stream(http: httpx.AsyncClient, url: str, body: dict[str, Any], stop_after: int | None
                 ) -> tuple[str, float | None, float | None]:  # fmt: skip
    """(text, time to first token, mean seconds between tokens), closing after `stop_after`."""
    start, first, last, n, parts = time.monotonic(), None, None, 0, []
    async with http.stream("POST", url + "/v1/chat/completions", json=body) as response:
        response.raise_for_status()
        async for line in response.aiter_lines():
            if not line.startswith("data: {"):
                continue
            for choice in json.loads(line[6:]).get("choices", []):
                content = (choice.get("delta") or {}).get("content")
                if content:
                    last = time.monotonic()
                    first = first or last
                    n += 1
                    parts.append(content)
            if stop_after is not None and n >= stop_after:
                break
    ttft = None if first is None else first - start
    step = None if first is None or last is None or n < 2 else (last - first) / (n - 1)
    return "".join(parts), ttft, step


def counters(vllm: VllmServer) -> dict[str, float]:
    m = vllm.metrics()
    return {
        "hits": m.get("vllm:prefix_cache_hits_total", 0.0),
        "computed": m.get("vllm:request_prefill_kv_computed_tokens_sum", 0.0),
    }


async def measured(vllm: VllmServer, http: httpx.AsyncClient, body: dict[str, Any]
                   ) -> dict[str, float | None]:  # fmt: skip
    before = counters(vllm)
    _text, ttft, _ = await stream(http, vllm.url, body, None)
    await asyncio.sleep(0.3)  # the finished request's stats reach /metrics
    after = counters(vllm)
    return {"ttft": ttft, **{k: after[k] - before[k] for k in after}}


async def trial(vllm: VllmServer, http: httpx.AsyncClient, i: int, delivered: int
                ) -> dict[str, Any]:  # fmt: skip
    original = {
        "model": SERVED_NAME,
        "messages": [{"role": "user", "content": f"[{i}] {PROMPT}"}],
        "max_tokens": 64,
        "stream": True,
    }
    text, _, step = await stream(http, vllm.url, original, delivered)
    await asyncio.sleep(0.3)  # the abort reaches the engine between two steps
    resume = continuation_body({**original, "max_tokens": 8}, text, delivered)
    cold = continuation_body(
        {**original, "messages": [{"role": "user", "content": f"[{i}] Cold. {PROMPT}"}],
         "max_tokens": 8}, text, delivered)  # fmt: skip
    return {"step": step, "resume": await measured(vllm, http, resume),
            "cold": await measured(vllm, http, cold)}  # fmt: skip


def median(values: list[float | None]) -> float | None:
    present = [v for v in values if v is not None]
    return statistics.median(present) if present else None


async def run_block_size(block: str, args: argparse.Namespace) -> dict[str, Any]:
    options = [] if block == "default" else ["--block-size", block]
    vllm = start_vllm(1, options=options)
    try:
        async with httpx.AsyncClient(timeout=120) as http:
            await trial(vllm, http, -1, args.delivered)  # warm-up, not counted
            trials = [await trial(vllm, http, i, args.delivered) for i in range(args.trials)]
    finally:
        vllm.stop()
    out: dict[str, Any] = {"block_size": block, "step": median([t["step"] for t in trials])}
    for leg in ("resume", "cold"):
        out[leg] = {k: median([t[leg][k] for t in trials]) for k in ("ttft", "computed", "hits")}
    return out


def table(results: list[dict[str, Any]]) -> str:
    rows = [
        "| block size | resume TTFT | cold TTFT | resume computed / cached tokens "
        "| cold computed / cached | decode step |",
        "|---|---|---|---|---|---|",
    ]
    for r in results:
        res, cold = r["resume"], r["cold"]
        rows.append(
            f"| {r['block_size']} | {res['ttft'] * 1000:.0f} ms | {cold['ttft'] * 1000:.0f} ms "
            f"| {res['computed']:.0f} / {res['hits']:.0f} | {cold['computed']:.0f} / "
            f"{cold['hits']:.0f} | {r['step'] * 1000:.1f} ms |"
        )
    return "\n".join(rows)


async def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--block-size", default="default,32", help="comma-separated; default: vLLM's")
    p.add_argument("--trials", type=int, default=7)
    p.add_argument("--delivered", type=int, default=40, help="tokens streamed before the pause")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    reason = missing()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    results = [await run_block_size(b, args) for b in args.block_size.split(",")]
    print(json.dumps(results, indent=2) if args.json else table(results))
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
