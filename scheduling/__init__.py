"""The scheduler: fair queues, priority bands, cost-weighted fair share and the metric gate.

A pure library (standard library only): the gateway builds `Job`s, submits them to a
`SchedulerService` and awaits the backend each one is given.
"""

from __future__ import annotations

from scheduling.backend_state import BackendMetrics, BackendState
from scheduling.config import BackendConfig, GateThresholds, SchedulerConfig, article_gates
from scheduling.core import Scheduler, Step
from scheduling.cost import CostPolicy, CostUnit, TokenWeights, job_cost
from scheduling.engine_cache import (
    AllBlocksCleared,
    BlocksRemoved,
    BlocksStored,
    CacheEvent,
    token_block_hashes,
)
from scheduling.errors import JobCancelled, NoBackend, QueueFull, QueueTimeout, SchedulingError
from scheduling.estimates import OutputLengths
from scheduling.gate import GateDecision, gate_open, is_saturated, is_usable
from scheduling.jobs import (
    BANDS,
    BATCH,
    INTERACTIVE,
    STANDARD,
    Dispatch,
    Eviction,
    Job,
    Principal,
    TierPolicy,
    WithinPrincipal,
)
from scheduling.lanes import create_principal_queue
from scheduling.position import QueuePosition, queue_position
from scheduling.service import SchedulerService, Ticket
from scheduling.snapshot import (
    BackendView,
    GateView,
    QueueView,
    SchedulerSnapshot,
    build_snapshot,
)

__all__ = [
    "BANDS",
    "BATCH",
    "INTERACTIVE",
    "STANDARD",
    "AllBlocksCleared",
    "BackendConfig",
    "BackendMetrics",
    "BackendState",
    "BackendView",
    "BlocksRemoved",
    "BlocksStored",
    "CacheEvent",
    "CostPolicy",
    "CostUnit",
    "Dispatch",
    "Eviction",
    "GateDecision",
    "GateThresholds",
    "GateView",
    "Job",
    "JobCancelled",
    "NoBackend",
    "OutputLengths",
    "Principal",
    "QueueFull",
    "QueuePosition",
    "QueueTimeout",
    "QueueView",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerService",
    "SchedulerSnapshot",
    "SchedulingError",
    "Step",
    "Ticket",
    "TierPolicy",
    "TokenWeights",
    "WithinPrincipal",
    "article_gates",
    "build_snapshot",
    "create_principal_queue",
    "gate_open",
    "is_saturated",
    "is_usable",
    "job_cost",
    "queue_position",
    "token_block_hashes",
]
