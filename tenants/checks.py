"""System checks for settings that only make sense together."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks


@checks.register(checks.Tags.security)
def check_debug_with_open_hosts(app_configs: Any, **kwargs: Any) -> list[checks.CheckMessage]:
    if settings.DEBUG and "*" in settings.ALLOWED_HOSTS:
        return [
            checks.Warning(
                "DEBUG is on and ALLOWED_HOSTS accepts every host.",
                hint="Turn DEBUG off, or list the hosts this gateway serves.",
                id="tenants.W001",
            )
        ]
    return []


@checks.register()
def check_stale_after_exceeds_scrape(app_configs: Any, **kwargs: Any) -> list[checks.CheckMessage]:
    conf = settings.LLMSERVER
    if conf["STALE_AFTER"] <= conf["SCRAPE_INTERVAL"]:
        return [
            checks.Error(
                "METRICS_STALE_AFTER must be longer than SCRAPE_INTERVAL, or every backend is "
                "always stale and every gate stays closed.",
                id="tenants.E001",
            )
        ]
    return []
