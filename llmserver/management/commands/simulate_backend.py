"""Run the vLLM-like backend simulator: `manage.py simulate_backend --port 8100 --max-num-seqs 16`."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandParser

from llmserver.simulator.engine import EngineConfig
from llmserver.simulator.exposition import FORMATS


class Command(BaseCommand):
    help = "Serve a simulated vLLM (or TGI / SGLang) backend with continuous batching."

    def add_arguments(self, parser: CommandParser) -> None:
        d = EngineConfig()
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8100)
        parser.add_argument("--model", default="demo-llama")
        parser.add_argument(
            "--format", choices=FORMATS, default="vllm", help="Whose metric names to expose."
        )
        parser.add_argument("--max-num-seqs", type=int, default=d.max_num_seqs)
        parser.add_argument("--scheduling-policy", choices=("fcfs", "priority"), default="fcfs")
        parser.add_argument("--base-step-ms", type=float, default=d.base_step_ms)
        parser.add_argument("--per-seq-ms", type=float, default=d.per_seq_ms)
        parser.add_argument("--prefill-ms-per-token", type=float, default=d.prefill_ms_per_token)
        parser.add_argument("--kv-capacity-tokens", type=int, default=d.kv_capacity_tokens)
        parser.add_argument(
            "--prefix-cache-blocks",
            type=int,
            default=d.prefix_cache_blocks,
            help="0 turns the prefix cache off.",
        )
        parser.add_argument("--speed", type=float, default=1.0, help="Divides every duration.")

    def handle(self, *args: Any, **options: Any) -> None:
        from daphne.endpoints import build_endpoint_description_strings
        from daphne.server import Server

        from llmserver.simulator.app import SimulatorApp

        if options["speed"] <= 0 or options["max_num_seqs"] < 1:
            self.stderr.write("--speed must be positive and --max-num-seqs at least 1.")
            raise SystemExit(2)
        config = EngineConfig(
            max_num_seqs=options["max_num_seqs"],
            base_step_ms=options["base_step_ms"],
            per_seq_ms=options["per_seq_ms"],
            prefill_ms_per_token=options["prefill_ms_per_token"],
            kv_capacity_tokens=options["kv_capacity_tokens"],
            prefix_cache_blocks=options["prefix_cache_blocks"],
            scheduling_policy=options["scheduling_policy"],
            speed=options["speed"],
        )
        app = SimulatorApp(config, model=options["model"], fmt=options["format"])
        self.stdout.write(
            f"Simulator ({options['format']}, {options['model']}) on http://{options['host']}:{options['port']}"
        )
        Server(
            application=app,
            endpoints=build_endpoint_description_strings(
                host=options["host"], port=options["port"]
            ),
            http_timeout=None,
            application_close_timeout=5,
            server_name="llm-server-simulator",
        ).run()
