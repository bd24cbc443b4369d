"""Load the demo: three tiers, a demo tenant with keys, prices, and a route to the simulator.

Idempotent: tiers, tenant, prices and backend are updated in place. The demo keys and the admin
password are made once and kept in a git-ignored local file (`.demo-keys.json`, owner-only), so
every later run prints the same working ones; `--reset` makes new ones and revokes the old keys.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandParser
from django.db import transaction

from tenants.demo import keystore
from tenants.demo.credentials import (
    ADMIN_USERNAME,
    demo_admin_password,
    demo_keys,
    make_tenant_administrator,
)
from tenants.demo.data import DEMO_MODEL, load_demo


class Command(BaseCommand):
    help = "Create the demo tiers, tenant, keys, prices and simulator route; print the keys."

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--simulator-url", default="http://127.0.0.1:8100")
        parser.add_argument(
            "--gateway-url",
            default="http://127.0.0.1:8000",
            help="Where the gateway will listen, for the printed admin and curl lines.",
        )
        parser.add_argument("--json", action="store_true")
        parser.add_argument(
            "--reset", action="store_true", help="New keys and admin password; old keys revoked."
        )
        parser.add_argument(
            "--keys-file",
            type=Path,
            default=None,
            help=f"Where the demo secrets are kept (default: {keystore.DEFAULT_FILE_NAME}).",
        )
        parser.add_argument(
            "--no-admin", action="store_true", help="Do not create or print the demo admin."
        )

    def handle(self, *args: Any, **options: Any) -> None:
        path: Path = options["keys_file"] or keystore.default_path()
        stored = keystore.load(path)
        reset = options["reset"]
        with transaction.atomic():
            tenant, tiers = load_demo(options["simulator_url"])
            keys = demo_keys(tenant, tiers, stored.keys, reset)
            password = None
            if not options["no_admin"]:
                password = demo_admin_password(stored.admin_password, reset)
                make_tenant_administrator(tenant)
        keystore.save(
            path, keystore.DemoSecrets(keys=keys, admin_password=password or stored.admin_password)
        )
        if options["json"]:
            payload = {"model": DEMO_MODEL, "keys": keys, "admin_password": password}
            self.stdout.write(json.dumps(payload))
        else:
            self._print(keys, password, options["gateway_url"].rstrip("/"), options)

    def _print(
        self, keys: list[dict[str, str]], password: str | None, gateway: str, options: Any
    ) -> None:
        if password:
            self.stdout.write(
                f"Admin: {gateway}/admin/  user {ADMIN_USERNAME!r}, password {password}"
            )
            self.stdout.write(
                f"Tenant pages: {gateway}/portal/  (the same login: demo's administrator)"
            )
        self.stdout.write(
            f"Demo tenant 'demo', model {DEMO_MODEL!r} on {options['simulator_url']}."
        )
        for entry in keys:
            self.stdout.write(f"  {entry['user']:<13} {entry['tier']:<12} {entry['key']}")
        self.stdout.write(
            f"(kept in {options['keys_file'] or keystore.DEFAULT_FILE_NAME}; "
            "`manage.py demo --reset` makes new ones)"
        )
        first = keys[0]["key"]
        self.stdout.write("Try it:")
        self.stdout.write(
            f"  curl -N {gateway}/v1/chat/completions -H 'Authorization: Bearer {first}'"
            f' -H \'Content-Type: application/json\' -d \'{{"model": "{DEMO_MODEL}", "stream": true,'
            ' "messages": [{"role": "user", "content": "Hello"}]}\''
        )
