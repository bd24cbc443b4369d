"""Run the gateway under daphne, optionally with the built-in backend simulator beside it.

`make run` uses this: first with `--check-ports` (a busy port fails before the demo is touched),
then to serve. The simulator starts as a child process (stopped when the gateway stops),
through the simulator's one launcher, then daphne serves `llmserver.asgi:application` in this process.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from llmserver.runtime.ports import PortBusy, ensure_free
from simulator.launcher import start_simulator


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
        parser.add_argument(
            "--check-ports",
            action="store_true",
            help="Only check that the ports are free (exit 1 naming a busy one), then exit.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        ports = {"gateway": (options["port"], "PORT")}
        if options["simulator_port"]:
            ports["simulator"] = (options["simulator_port"], "SIM_PORT")
        try:
            ensure_free(options["host"], ports)
        except PortBusy as exc:
            raise CommandError(str(exc)) from None
        if options["check_ports"]:
            return
        simulator = None
        if options["simulator_port"]:
            host, port = options["host"], options["simulator_port"]
            try:
                simulator = start_simulator(
                    *options["simulator_args"].split(), host=host, port=port, quiet=False
                )
            except (RuntimeError, TimeoutError) as exc:
                raise CommandError(f"The simulator did not start: {exc}") from exc
            self.stdout.write(f"Backend simulator on {simulator.url}")
        try:
            self._serve(options["host"], options["port"])
        finally:
            if simulator is not None:
                simulator.stop()

    def _serve(self, host: str, port: int) -> None:
        from llmserver.asgi import application
        from llmserver.conf import gateway_settings
        from llmserver.runtime.serving import DrainingServer

        self.stdout.write(f"Gateway on http://{host}:{port} (admin: http://{host}:{port}/admin/)")
        DrainingServer(application, host, port, gateway_settings()).run()
