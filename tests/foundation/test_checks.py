"""System checks for settings that only make sense together."""

from __future__ import annotations

from llmserver.checks import (
    check_debug_with_open_hosts,
    check_redis_transport_has_redis,
    check_settings_read,
    check_stale_after_exceeds_scrape,
    check_usage_retention,
)


def test_e001_stale_after_must_exceed_the_scrape_interval(settings):
    settings.LLMSERVER = {**settings.LLMSERVER, "SCRAPE_INTERVAL": 2.0, "STALE_AFTER": 1.0}
    assert [m.id for m in check_stale_after_exceeds_scrape(None)] == ["gateway.E001"]
    settings.LLMSERVER = {**settings.LLMSERVER, "SCRAPE_INTERVAL": 0.25, "STALE_AFTER": 2.0}
    assert check_stale_after_exceeds_scrape(None) == []


def test_w001_debug_with_every_host_allowed(settings):
    settings.DEBUG, settings.ALLOWED_HOSTS = True, ["*"]
    assert [m.id for m in check_debug_with_open_hosts(None)] == ["gateway.W001"]
    settings.DEBUG = False
    assert check_debug_with_open_hosts(None) == []


def test_e002_a_setting_the_gateway_does_not_know_is_an_error(settings):
    settings.LLMSERVER = {**settings.LLMSERVER, "SCRAPE_INTERVALL": 1.0}
    assert [m.id for m in check_settings_read(None)] == ["gateway.E002"]


def test_e003_the_redis_scheduler_transport_needs_redis(settings):
    settings.LLMSERVER = {**settings.LLMSERVER, "SCHEDULER_TRANSPORT": "redis", "REDIS_URL": ""}
    assert [m.id for m in check_redis_transport_has_redis(None)] == ["gateway.E003"]
    settings.LLMSERVER = {**settings.LLMSERVER, "REDIS_URL": "redis://127.0.0.1:6379/4"}
    assert check_redis_transport_has_redis(None) == []


def test_e004_usage_retention_must_keep_at_least_a_day(settings):
    settings.LLMSERVER = {**settings.LLMSERVER, "USAGE_RETENTION_DAYS": 0}
    assert [m.id for m in check_usage_retention(None)] == ["gateway.E004"]
    settings.LLMSERVER = {**settings.LLMSERVER, "USAGE_RETENTION_DAYS": 1}
    assert check_usage_retention(None) == []
