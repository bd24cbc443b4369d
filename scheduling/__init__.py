"""The scheduler: fair queues, priority bands, cost-weighted fair share and the metric gate.

A pure library (standard library only): the gateway builds `Job`s, submits them to a
`SchedulerService` and awaits the backend each one is given.
"""

from __future__ import annotations

from scheduling.backend_state import BackendMetrics, BackendState
from scheduling.config import BackendConfig, GateThresholds, SchedulerConfig, article_gates
from scheduling.core import Scheduler, Step
from scheduling.cost import CostUnit, estimate_cost, real_cost
from scheduling.errors import JobCancelled, NoBackend, QueueFull, QueueTimeout, SchedulingError
from scheduling.gate import GateDecision, gate_open, is_saturated
from scheduling.jobs import BATCH, INTERACTIVE, STANDARD, Dispatch, Job, Principal
from scheduling.lanes import create_principal_queue
from scheduling.service import SchedulerService, Ticket
from scheduling.snapshot import build_snapshot

__all__ = [
    "BATCH",
    "INTERACTIVE",
    "STANDARD",
    "BackendConfig",
    "BackendMetrics",
    "BackendState",
    "CostUnit",
    "Dispatch",
    "GateDecision",
    "GateThresholds",
    "Job",
    "JobCancelled",
    "NoBackend",
    "Principal",
    "QueueFull",
    "QueueTimeout",
    "Scheduler",
    "SchedulerConfig",
    "SchedulerService",
    "SchedulingError",
    "Step",
    "Ticket",
    "article_gates",
    "build_snapshot",
    "create_principal_queue",
    "estimate_cost",
    "gate_open",
    "is_saturated",
    "real_cost",
]
