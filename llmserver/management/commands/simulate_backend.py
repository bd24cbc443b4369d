"""`manage.py simulate_backend --port 8100 --max-num-seqs 16`: serve the backend simulator."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from simulator.cli import add_arguments, config_from, serve


class Command(BaseCommand):
    help = "Serve a simulated vLLM (or TGI / SGLang) backend with continuous batching."

    def add_arguments(self, parser: CommandParser) -> None:
        add_arguments(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            config_from(options)
        except ValueError as exc:
            raise CommandError(str(exc)) from exc
        serve(options)
