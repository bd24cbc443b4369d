"""Why a job did not (or will not) reach a backend; each carries what the API response needs."""

from __future__ import annotations


class SchedulingError(Exception):
    """Base class, so the gateway can catch every scheduler refusal in one place."""


class QueueFull(SchedulingError):
    """The principal already has `max_queued` jobs waiting: the API answers 429 + Retry-After."""

    def __init__(self, retry_after: float, message: str = "queue full") -> None:
        super().__init__(message)
        self.retry_after = retry_after


class NoBackend(SchedulingError):
    """No enabled backend serves the job's model (or all were excluded after failures)."""


class QueueTimeout(SchedulingError):
    """The job waited past its deadline and was expired without being dispatched."""


class JobCancelled(SchedulingError):
    """The job was cancelled (client gone) before it was dispatched."""
