"""Register a backend and route models to it.

`manage.py add_backend gpu1 http://10.0.0.5:8000 --kind vllm --model llama-3-8b:meta-llama/Llama-3.1-8B`
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.core.management.base import BaseCommand, CommandError, CommandParser
from django.core.validators import URLValidator
from django.db import transaction

from tenants.backend_kinds import DEFAULT_KIND, PROFILES
from tenants.endpoints import parse_endpoints
from tenants.models import Backend, ModelRoute


class Command(BaseCommand):
    help = "Create or update a backend and route public model names to it."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("name")
        parser.add_argument("base_url")
        parser.add_argument("--kind", choices=list(PROFILES), default=DEFAULT_KIND)
        parser.add_argument("--metrics-url", default="")
        parser.add_argument("--api-key", default="")
        parser.add_argument("--max-in-flight", type=int, default=64)
        parser.add_argument(
            "--model",
            action="append",
            default=[],
            metavar="PUBLIC[:UPSTREAM]",
            help="Route this public model name here (repeatable); upstream name defaults to it.",
        )
        parser.add_argument("--disabled", action="store_true")
        parser.add_argument(
            "--capacity", type=int, help="Requests the server runs at once (max_num_seqs)."
        )
        parser.add_argument(
            "--kv-events-endpoint",
            default="",
            help="Where the server publishes KV cache events, e.g. tcp://gpu1:5557.",
        )
        parser.add_argument(
            "--kv-events-bind",
            action="store_true",
            help="Bind the events endpoint; the server connects to it (vLLM without a wildcard).",
        )
        parser.add_argument(
            "--endpoints",
            default="",
            help="The endpoints the server serves the --model routes on, comma-separated "
            "(chat, completions, embeddings, responses, messages, rerank, score); "
            "default: its kind's.",
        )
        parser.add_argument(
            "--priority-scheduling",
            action="store_true",
            help="The server schedules by priority (vLLM --scheduling-policy priority).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        validate = URLValidator(schemes=["http", "https"])
        for field in ("base_url", "metrics_url"):
            if options[field]:
                try:
                    validate(options[field])
                except ValidationError:
                    raise CommandError(
                        f"{field} {options[field]!r} is not an http(s) URL."
                    ) from None
        if options["kv_events_endpoint"]:
            try:
                for check in Backend._meta.get_field("kv_events_endpoint").validators:
                    check(options["kv_events_endpoint"])
            except ValidationError as exc:
                raise CommandError(f"--kv-events-endpoint: {exc.messages[0]}") from None
        try:
            parse_endpoints(options["endpoints"])
        except ValueError as exc:
            raise CommandError(f"--endpoints: {exc}") from None
        if options["max_in_flight"] < 1:
            raise CommandError("--max-in-flight must be at least 1.")
        with transaction.atomic():
            backend, created = Backend.objects.update_or_create(
                name=options["name"],
                defaults={
                    "base_url": options["base_url"],
                    "kind": options["kind"],
                    "metrics_url": options["metrics_url"],
                    "api_key": options["api_key"],
                    "max_in_flight": options["max_in_flight"],
                    "enabled": not options["disabled"],
                    "priority_scheduling": options["priority_scheduling"],
                    "capacity": options["capacity"],
                    "kv_events_endpoint": options["kv_events_endpoint"],
                    "kv_events_bind": options["kv_events_bind"],
                },
            )
            for spec in options["model"]:
                public, _, upstream = spec.partition(":")
                if not public:
                    raise CommandError(f"--model {spec!r}: the public name is empty.")
                ModelRoute.objects.update_or_create(
                    public_name=public,
                    backend=backend,
                    defaults={"upstream_model": upstream, "endpoints": options["endpoints"]},
                )
        verb = "Created" if created else "Updated"
        models = ", ".join(r.public_name for r in backend.routes.all()) or "no models yet"
        self.stdout.write(
            f"{verb} backend {backend.name} ({backend.kind}) at {backend.base_url}: {models}."
        )
