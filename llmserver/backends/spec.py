"""One backend as the operator configured it, detached from the ORM: what the pool builds its
client, poller and event subscriber from (`llmserver.backends.pool`). The defaults are the
admin's (`tenants.models.Backend`), for a client built by hand in a test or a benchmark."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class BackendSpec:
    name: str
    kind: str
    base_url: str
    metrics_url: str = ""
    api_key: str = ""
    max_in_flight: int = 64
    capacity: int | None = None
    priority_scheduling: bool = False
    preemption: bool = False
    kv_events_endpoint: str = ""
    kv_events_bind: bool = False
    first_byte_timeout: float = 60.0
