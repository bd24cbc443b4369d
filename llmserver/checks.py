"""The gateway's system checks: settings that cannot be read, or only make sense together."""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.core import checks

from llmserver.conf import SchedulerTransportKind, gateway_settings


@checks.register(checks.Tags.security)
def check_debug_with_open_hosts(app_configs: Any, **kwargs: Any) -> list[checks.CheckMessage]:
    if settings.DEBUG and "*" in settings.ALLOWED_HOSTS:
        return [
            checks.Warning(
                "DEBUG is on and ALLOWED_HOSTS accepts every host.",
                hint="Turn DEBUG off, or list the hosts this gateway serves.",
                id="gateway.W001",
            )
        ]
    return []


@checks.register()
def check_settings_read(app_configs: Any, **kwargs: Any) -> list[checks.CheckMessage]:
    try:
        gateway_settings()
    except (TypeError, ValueError) as exc:
        return [checks.Error(f"LLMSERVER cannot be read: {exc}", id="gateway.E002")]
    return []


@checks.register()
def check_stale_after_exceeds_scrape(app_configs: Any, **kwargs: Any) -> list[checks.CheckMessage]:
    try:
        conf = gateway_settings()
    except (TypeError, ValueError):
        return []  # gateway.E002 says why
    if conf.stale_after <= conf.scrape_interval:
        return [
            checks.Error(
                "METRICS_STALE_AFTER must be longer than SCRAPE_INTERVAL, or every backend is "
                "always stale and every gate stays closed.",
                id="gateway.E001",
            )
        ]
    return []


@checks.register()
def check_redis_transport_has_redis(app_configs: Any, **kwargs: Any) -> list[checks.CheckMessage]:
    try:
        conf = gateway_settings()
    except (TypeError, ValueError):
        return []  # gateway.E002 says why
    if conf.scheduler_transport == SchedulerTransportKind.REDIS and not conf.redis_url:
        return [
            checks.Error(
                "SCHEDULER_TRANSPORT=redis needs REDIS_URL: the processes share their scheduler "
                "through Redis.",
                id="gateway.E003",
            )
        ]
    return []


@checks.register()
def check_usage_retention(app_configs: Any, **kwargs: Any) -> list[checks.CheckMessage]:
    try:
        conf = gateway_settings()
    except (TypeError, ValueError):
        return []  # gateway.E002 says why
    from tenants.retention import MIN_DAYS  # the models, which checks may import once loaded

    if conf.usage_retention_days < MIN_DAYS:
        return [
            checks.Error(
                f"USAGE_RETENTION_DAYS must be at least {MIN_DAYS}: hourly and "
                "per-minute quota windows count per-request usage rows, which pruning deletes.",
                id="gateway.E004",
            )
        ]
    return []
