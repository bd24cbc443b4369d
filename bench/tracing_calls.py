"""What tracing costs one request, in CPU: the calls `Completion` makes to its `RequestTrace`,
timed alone, with tracing off, on, on with one request in ten sampled, and not at all
("before": the same loop without the calls).

Each "request" is the pipeline's sequence for a streamed chat dispatched once: the trace made
from the request's headers, admission, queue, dispatch (with the headers for the engine), first
token, the upstream request's end, accounting and the end. "on" exports every span over
OTLP/HTTP to a sink in another process (`python -m llmserver.testing.otlp`) at OpenTelemetry's
defaults (all sampled, batched); its figure is the process's CPU, every thread (the batch
processor's encoding and POSTs), after a final flush, so nothing is left unpaid; its queue is
made long enough that no span is dropped (a loop outruns any exporter). "sampled" is "on" with
`OTEL_TRACES_SAMPLER=parentbased_traceidratio`, `OTEL_TRACES_SAMPLER_ARG=0.1`. The ways
alternate over `--rounds`; the table has each one's median. Against the gateway's CPU for a
whole request (bench/overhead.py), this is tracing's share.

    .venv/bin/python bench/tracing_calls.py
    .venv/bin/python bench/tracing_calls.py --requests 20000 --rounds 7 --json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from datetime import UTC, datetime

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmserver.settings")
os.environ.setdefault("SECRET_KEY", "bench")
django.setup()

from tracing_overhead import start_sink  # noqa: E402

from llmserver.backends.spec import BackendSpec  # noqa: E402
from llmserver.backends.upstream import UpstreamClient  # noqa: E402
from llmserver.conf import GatewaySettings  # noqa: E402
from llmserver.runtime.keys import KeyInfo  # noqa: E402
from llmserver.runtime.telemetry import gateway_tracing  # noqa: E402
from llmserver.runtime.tracing import Tracing  # noqa: E402
from llmserver.runtime.usage import UsageDraft  # noqa: E402
from llmserver.testing.processes import stop  # noqa: E402
from llmserver.wire.validation import TokenLimits, validate  # noqa: E402
from scheduling import TierPolicy  # noqa: E402

KEY = KeyInfo(
    key_id=1,
    tenant_id=1,
    tenant_slug="acme",
    user="alice",
    tier_id=1,
    tier_name="interactive",
    band=0,
    policy=TierPolicy(),
    queue_timeout=60.0,
    model_patterns=(),
    has_quota_rules=False,
    monthly_budget=None,
    over_budget="reject",
)
BODY = {
    "model": "demo-llama",
    "stream": True,
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "Say hello."}],
}
HEADERS = [
    (b"authorization", b"Bearer sk-llms-0123456789"),
    (b"content-type", b"application/json"),
    (b"content-length", b"96"),
]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--requests", type=int, default=10_000, help="Requests per round and way.")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--json", action="store_true")
    return p.parse_args(argv)


def requests(tracing: Tracing | None, n: int, client: UpstreamClient) -> None:
    """`n` requests' worth of trace calls, as `Completion` makes them (None: no calls at all)."""
    req = validate("chat", BODY, TokenLimits(256, 32768))
    for i in range(n):
        draft = UsageDraft(
            request_id=f"chatcmpl-{i:024d}",
            tenant_id=1,
            tenant_slug="acme",
            api_key_id=1,
            user="alice",
            model="demo-llama",
            tier="interactive",
            band=0,
            queued_at=datetime.now(UTC),
            prompt_tokens=7,
            completion_tokens=64,
        )
        if tracing is None:
            continue
        trace = tracing.request(draft.request_id, KEY, req, HEADERS)
        trace.admitting()
        trace.queued(0)
        trace.dispatched("sim", "demo-llama", client, False)
        trace.first_token()
        trace.forwarded()
        trace.settling()
        trace.finish(draft)


async def cpu_per_request(tracing: Tracing | None, n: int, client: UpstreamClient) -> float:
    """Microseconds of this process's CPU (all threads) per request, exports included."""
    start = time.process_time()
    requests(tracing, n, client)
    if tracing is not None:
        await tracing.flush()
    return (time.process_time() - start) * 1e6 / n


async def measure(args: argparse.Namespace) -> dict[str, list[float]]:
    sink_url, sink = start_sink()
    client = UpstreamClient(BackendSpec("sim", "vllm", "http://127.0.0.1:8100"))
    on = GatewaySettings(traces_exporters=("otlp",), otlp_traces_endpoint=sink_url + "/v1/traces")
    os.environ["OTEL_BSP_MAX_QUEUE_SIZE"] = str(8 * args.requests)
    ways: dict[str, Tracing | None] = {
        "before": None,
        "off": gateway_tracing(GatewaySettings()),
        "on": gateway_tracing(on),
    }
    os.environ["OTEL_TRACES_SAMPLER"] = "parentbased_traceidratio"
    os.environ["OTEL_TRACES_SAMPLER_ARG"] = "0.1"
    ways["sampled"] = gateway_tracing(on)
    samples: dict[str, list[float]] = {name: [] for name in ways}
    try:
        for tracing in ways.values():  # a warm-up each: imports, the first connection
            await cpu_per_request(tracing, min(1000, args.requests), client)
        names = list(ways)
        for round_ in range(args.rounds):
            turn = round_ % len(names)
            for name in names[turn:] + names[:turn]:
                samples[name].append(await cpu_per_request(ways[name], args.requests, client))
                print(f"round {round_ + 1} {name}: {samples[name][-1]:.2f} us", file=sys.stderr)
        spans = json.loads(_get(sink_url + "/count"))["spans"]
        print(f"spans received by the sink: {spans}", file=sys.stderr)
    finally:
        for tracing in ways.values():
            if tracing is not None:
                await tracing.aclose()
        await client.aclose()
        stop(sink)
    return samples


def _get(url: str) -> str:
    import httpx

    return httpx.get(url, timeout=5).text


def table(samples: dict[str, list[float]]) -> str:
    before = statistics.median(samples["before"])
    lines = [
        "| way | CPU us per request (median) | added over before, us | rounds |",
        "|---|---|---|---|",
    ]
    for name, values in samples.items():
        median = statistics.median(values)
        spread = ", ".join(f"{v:.2f}" for v in values)
        lines.append(f"| {name} | {median:.2f} | {median - before:.2f} | {spread} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    samples = asyncio.run(measure(args))
    if args.json:
        medians = {name: statistics.median(values) for name, values in samples.items()}
        print(json.dumps({"settings": vars(args), "samples": samples, "medians": medians}))
    else:
        print(table(samples))
    return 0


if __name__ == "__main__":
    sys.exit(main())
