"""Run the gateway under daphne, optionally with the built-in backend simulator beside it.

`make run` uses this: first with `--check-ports` (a busy port fails before the demo is touched),
then to serve. The simulator starts as a child process (stopped when the gateway stops),
through the simulator's one launcher, then daphne serves `llmserver.asgi:application` in this
process, or, with `--workers N`, in N worker processes sharing one socket and one scheduler
(`llmserver.serving.workers`).
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError, CommandParser

from llmserver.serving.ports import PortBusy, ensure_free
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
            "--workers",
            type=int,
            default=1,
            help="Serve with N processes on one socket, sharing one scheduler (needs REDIS_URL).",
        )
        parser.add_argument(
            "--fd",
            type=int,
            help="Serve on this inherited listening socket (a --workers child, or 3 under "
            "systemd socket activation) instead of binding --host/--port.",
        )
        parser.add_argument(
            "--check-ports",
            action="store_true",
            help="Only check that the ports are free (exit 1 naming a busy one), then exit.",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        if options["fd"] is not None:
            self._serve(options["host"], options["port"], options["fd"])
            return
        workers = options["workers"]
        if workers < 1:
            raise CommandError("--workers must be at least 1.")
        if workers > 1 and not settings.REDIS_URL:
            raise CommandError(
                f"--workers {workers} needs REDIS_URL: the workers share one scheduler (one fair "
                "queue) through Redis. Set REDIS_URL=redis://host:6379/0, or use --workers 1."
            )
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
            if workers > 1:
                self._supervise(options["host"], options["port"], workers)
            else:
                self._serve(options["host"], options["port"])
        finally:
            if simulator is not None:
                simulator.stop()

    def _serve(self, host: str, port: int, fd: int | None = None) -> None:
        from llmserver.asgi import application
        from llmserver.conf import gateway_settings
        from llmserver.serving.drain import DrainingServer

        if fd is None:
            self.stdout.write(
                f"Gateway on http://{host}:{port} (admin: http://{host}:{port}/admin/)"
            )
        DrainingServer(application, host, port, gateway_settings(), fd).run()

    def _supervise(self, host: str, port: int, workers: int) -> None:
        from llmserver.serving.workers import serve_workers

        self.stdout.write(
            f"Gateway on http://{host}:{port} (admin: http://{host}:{port}/admin/): {workers} "
            f"worker processes sharing one scheduler through Redis at {settings.REDIS_URL}"
        )
        code = serve_workers(host, port, workers)
        if code:
            raise CommandError(f"a worker exited with status {code}")
