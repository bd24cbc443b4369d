"""Command-line options for the simulator (`python -m simulator`), and the daphne server that
serves it."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from simulator.engine import EngineConfig
from simulator.exposition import FORMATS
from simulator.protocol import NATURAL_STOPS, RUNNERS
from simulator.queue import POLICIES


def add_arguments(parser: argparse.ArgumentParser) -> None:
    d = EngineConfig()
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--model", default="demo-llama")
    parser.add_argument("--format", choices=FORMATS, default="vllm", help="whose metric names")
    parser.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs)
    parser.add_argument("--scheduling-policy", choices=POLICIES, default=d.scheduling_policy)
    parser.add_argument("--base-step-ms", type=float, default=d.base_step_ms)
    parser.add_argument("--per-seq-ms", type=float, default=d.per_seq_ms)
    parser.add_argument("--prefill-ms-per-token", type=float, default=d.prefill_ms_per_token)
    parser.add_argument(
        "--prefill-step-ms",
        type=float,
        default=d.prefill_step_ms,
        help="what a step that computes any prompt costs beyond its tokens",
    )
    parser.add_argument("--kv-capacity-tokens", type=int, default=d.kv_capacity_tokens)
    parser.add_argument(
        "--prefix-cache-blocks",
        type=int,
        default=d.prefix_cache_blocks,
        help="0 disables the prefix cache",
    )
    parser.add_argument("--block-tokens", type=int, default=d.block_tokens)
    parser.add_argument(
        "--max-model-len",
        type=int,
        default=None,
        help="the context length (prompt and output), as vLLM's; default: --kv-capacity-tokens",
    )
    parser.add_argument(
        "--runner",
        choices=RUNNERS,
        default="both",
        help="generate: no /v1/embeddings (404), as vLLM with a generation model; pooling: only "
        "/v1/embeddings, as vLLM with an embedding model; both (default): every endpoint",
    )
    parser.add_argument(
        "--natural-stop",
        choices=NATURAL_STOPS,
        default="when-unlimited",
        help="when answers end on their own (20-200 tokens, finish reason stop): only where the "
        "client set no max_tokens (default), or always (unless ignore_eos)",
    )
    parser.add_argument("--speed", type=float, default=d.speed, help="divides every duration")
    parser.add_argument(
        "--kv-events-config",
        default="",
        help='vLLM\'s JSON, e.g. {"enable_kv_cache_events": true, "publisher": "zmq", '
        '"endpoint": "tcp://127.0.0.1:5557"}: publish KV cache events there',
    )
    parser.add_argument(
        "--legacy-metric-names",
        action="store_true",
        help="also expose vLLM's pre-v1 names (gpu_cache_usage_perc, time_per_output_token_seconds)",
    )
    parser.add_argument(
        "--enable-responses-store",
        action="store_true",
        help="keep responses as vLLM does with VLLM_ENABLE_RESPONSES_API_STORE=1: in memory, "
        "for every caller, so that any previous_response_id can be continued",
    )
    parser.add_argument(
        "--refuse-priority-under-fcfs",
        action="store_true",
        help="refuse a non-zero priority under fcfs with 400, as vLLM's V0 engine did (before "
        "0.8.0, or VLLM_USE_V1=0 up to 0.10); vLLM's V1 engine ignores it (the default)",
    )


def config_from(options: dict[str, object]) -> EngineConfig:
    return EngineConfig(
        max_num_seqs=int(options["max_num_seqs"]),  # type: ignore[call-overload]
        base_step_ms=float(options["base_step_ms"]),  # type: ignore[arg-type]
        per_seq_ms=float(options["per_seq_ms"]),  # type: ignore[arg-type]
        prefill_ms_per_token=float(options["prefill_ms_per_token"]),  # type: ignore[arg-type]
        prefill_step_ms=float(options["prefill_step_ms"]),  # type: ignore[arg-type]
        kv_capacity_tokens=int(options["kv_capacity_tokens"]),  # type: ignore[call-overload]
        prefix_cache_blocks=int(options["prefix_cache_blocks"]),  # type: ignore[call-overload]
        block_tokens=int(options["block_tokens"]),  # type: ignore[call-overload]
        scheduling_policy=str(options["scheduling_policy"]),
        speed=float(options["speed"]),  # type: ignore[arg-type]
        max_model_len=None
        if options.get("max_model_len") is None
        else int(options["max_model_len"]),  # type: ignore[call-overload]
    )


def serve(options: dict[str, object]) -> None:
    """Serve until interrupted. Daphne is the project's ASGI server and streams chunk by chunk;
    it delivers `http.disconnect` when a client drops, which the abort path relies on."""
    from daphne.server import Server

    from simulator.app import SimulatorApp
    from simulator.kv_events import KvEventsConfig

    app = SimulatorApp(
        config_from(options),
        model=str(options["model"]),
        fmt=str(options["format"]),
        runner=str(options.get("runner", "both")),
        natural_stop=str(options.get("natural_stop", "when-unlimited")),
        legacy_metric_names=bool(options["legacy_metric_names"]),
        refuse_priority_under_fcfs=bool(options.get("refuse_priority_under_fcfs")),
        responses_store=bool(options.get("enable_responses_store")),
        kv_events=KvEventsConfig.parse(str(options["kv_events_config"]))
        if options.get("kv_events_config")
        else None,
    )
    host, port = options["host"], options["port"]
    print(
        f"simulator ({options['format']}, {options['model']}) on http://{host}:{port}", flush=True
    )
    Server(
        application=app,
        endpoints=[f"tcp:port={port}:interface={host}"],
        http_timeout=None,
        application_close_timeout=2,
        server_name="llmserver-simulator",
        verbosity=0,
    ).run()


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m simulator")
    add_arguments(parser)
    options = vars(parser.parse_args(argv))
    try:
        config_from(options)
    except ValueError as exc:
        parser.error(str(exc))
    serve(options)


if __name__ == "__main__":
    main(sys.argv[1:])
