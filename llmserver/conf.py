"""The gateway's process settings as one frozen object, read once from `settings.LLMSERVER`.

`settings.py` reads the environment into `LLMSERVER` (a plain dict, so Django's test settings can
override it); everything else reads this object, built when the gateway starts and checked by the
`gateway.*` system checks. This class is the one home of each default: `settings.py` falls back
to `DEFAULTS`, and the scheduler's own knobs default to `scheduling.SchedulerConfig`'s.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from pathlib import Path
from typing import Any

from django.conf import settings

from scheduling import CostUnit, SchedulerConfig, TokenWeights, WithinPrincipal

_SCHEDULER = SchedulerConfig()
# The project's own var/ (git-ignored data), beside the packages; never a served static path.
_VAR = Path(__file__).resolve().parent.parent / "var"


class SchedulerTransportKind(StrEnum):
    """Where the scheduler lives: in this process, or one for every process sharing Redis."""

    LOCAL = "local"
    REDIS = "redis"


@dataclass(frozen=True, slots=True)
class GatewaySettings:
    cost_unit: CostUnit = CostUnit.TOKENS
    output_token_weight: float = TokenWeights().output
    within_principal: WithinPrincipal = _SCHEDULER.within_principal
    aging_seconds: float | None = _SCHEDULER.aging_seconds
    affinity_slack: int = _SCHEDULER.affinity_slack
    prefix_index_blocks: int = _SCHEDULER.prefix_index_blocks
    batch_slack: float = _SCHEDULER.batch_slack
    batch_min_blocks: int = _SCHEDULER.batch_min_blocks
    scrape_interval: float = 0.25
    scrape_timeout: float = 1.0
    stale_after: float = _SCHEDULER.stale_after
    upstream_connect_timeout: float = 5.0
    upstream_read_timeout: float = 600.0
    upstream_max_connections: int = 1024
    upstream_keepalive_expiry: float = 4.0
    max_body_bytes: int = 1_048_576
    max_tokens_limit: int = 32768
    default_max_tokens: int = 256
    usage_flush_interval: float = 1.0
    usage_batch_size: int = 500
    # Per-request usage rows older than this many whole UTC days are deleted (tenants/retention.py);
    # their sums live on in the daily roll-ups, which every report, budget and quota reads.
    usage_retention_days: int = 90
    # A response the gateway returned can be continued (`previous_response_id`) for this many
    # days, as at OpenAI; then it is not found and is pruned (llmserver/pipeline/responses.py).
    responses_retention_days: int = 30
    key_cache_seconds: float = 30.0
    drain_seconds: float = 30.0
    # /metrics names tenants and counts their tokens: a bearer token and/or the client networks
    # allowed to read it; empty means open (a scraper on loopback, the default deployment).
    # Slow clients (rungateway's server): a request must arrive whole within the read timeout;
    # an idle keep-alive connection is closed after the idle timeout.
    client_read_timeout: float = 30.0
    client_idle_timeout: float = 60.0
    metrics_token: str = ""
    metrics_allow: tuple[str, ...] = ()
    # Browser pages (origins, or "*") that may call /v1 (llmserver/api/cors.py); empty: no CORS.
    cors_allowed_origins: tuple[str, ...] = ()
    access_log: bool = True
    # Where RPM/TPM windows live: Redis (shared by every gateway process) or, empty, memory.
    rate_limit_redis_url: str = ""
    # REDIS: one scheduler for every process sharing `redis_url` and `cluster_prefix`, led by
    # whoever holds the lease.
    scheduler_transport: SchedulerTransportKind = SchedulerTransportKind.LOCAL
    redis_url: str = ""
    cluster_prefix: str = "llmserver"
    cluster_lease_seconds: float = 3.0
    # The Batch API (llmserver/batches/): where files lie and their limits (OpenAI's: 200 MB,
    # 50,000 requests a batch); lines in flight per batch, batches run at once per process, how
    # often the runner looks for work and reports progress, and how long a claim on a batch
    # outlives a process that stopped renewing it.
    files_dir: str = str(_VAR / "files")
    files_max_bytes: int = 200 * 1024 * 1024
    batch_max_lines: int = 50_000
    batch_concurrency: int = 8
    batch_max_active: int = 4
    batch_poll_interval: float = 1.0
    batch_lease_seconds: float = 30.0
    # Tracing (llmserver/runtime/tracing.py), read from OpenTelemetry's OTEL_* variables: the
    # span exporters ("otlp", "console"; none, the default: off), the OTLP/HTTP URL spans are
    # posted to (OpenTelemetry's default) and the service's name in every trace.
    traces_exporters: tuple[str, ...] = ()
    otlp_traces_endpoint: str = "http://localhost:4318/v1/traces"
    service_name: str = "llm-server"

    @classmethod
    def from_mapping(cls, values: Mapping[str, Any]) -> GatewaySettings:
        """From `LLMSERVER`'s upper-case names; an unknown name is an error, not ignored."""
        known = {f.name for f in fields(cls)}
        unknown = {name.lower() for name in values} - known
        if unknown:
            raise ValueError(f"unknown LLMSERVER settings: {', '.join(sorted(unknown))}")
        options = {name.lower(): value for name, value in values.items()}
        options["cost_unit"] = CostUnit(options.get("cost_unit", CostUnit.TOKENS))
        if "within_principal" in options:
            options["within_principal"] = WithinPrincipal(options["within_principal"])
        if "scheduler_transport" in options:
            options["scheduler_transport"] = SchedulerTransportKind(options["scheduler_transport"])
        options["metrics_allow"] = tuple(options.get("metrics_allow", ()))
        options["cors_allowed_origins"] = tuple(options.get("cors_allowed_origins", ()))
        options["traces_exporters"] = tuple(options.get("traces_exporters", ()))
        return cls(**options)


DEFAULTS = GatewaySettings()


def gateway_settings() -> GatewaySettings:
    return GatewaySettings.from_mapping(settings.LLMSERVER)
