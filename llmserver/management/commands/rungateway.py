"""Run the gateway under daphne, optionally with the built-in backend simulator beside it.

`make run` uses this: the simulator starts as a child process (stopped when the gateway stops),
then daphne serves `llmserver.asgi:application` in this process.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from typing import Any

import httpx
from django.core.management.base import BaseCommand, CommandError, CommandParser


class Command(BaseCommand):
    help = "Serve the gateway with daphne (and the backend simulator, with --simulator-port)."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument(
            "--simulator-port", type=int, help="Also run the simulator on this port."
        )
        parser.add_argument(
            "--simulator-args", default="--max-num-seqs 16", help="Extra simulator flags."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        simulator = None
        if options["simulator_port"]:
            simulator = self._start_simulator(
                options["host"], options["simulator_port"], options["simulator_args"]
            )
        try:
            self._serve(options["host"], options["port"])
        finally:
            if simulator is not None:
                simulator.send_signal(signal.SIGTERM)
                try:
                    simulator.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    simulator.kill()

    def _start_simulator(self, host: str, port: int, extra: str) -> subprocess.Popen[bytes]:
        command = [
            sys.executable,
            "manage.py",
            "simulate_backend",
            "--host",
            host,
            "--port",
            str(port),
            *extra.split(),
        ]
        process = subprocess.Popen(command, env=os.environ.copy())
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise CommandError(f"The simulator exited with status {process.returncode}.")
            try:
                if httpx.get(f"http://{host}:{port}/health", timeout=1).status_code == 200:
                    self.stdout.write(f"Backend simulator on http://{host}:{port}")
                    return process
            except httpx.HTTPError:
                time.sleep(0.2)
        process.kill()
        raise CommandError("The simulator did not become healthy within 30 s.")

    def _serve(self, host: str, port: int) -> None:
        from daphne.endpoints import build_endpoint_description_strings
        from daphne.server import Server

        from llmserver.asgi import application

        self.stdout.write(f"Gateway on http://{host}:{port} (admin: http://{host}:{port}/admin/)")
        Server(
            application=application,
            endpoints=build_endpoint_description_strings(host=host, port=port),
            http_timeout=None,
            application_close_timeout=10,
            websocket_handshake_timeout=10,
            server_name="llm-server",
        ).run()
