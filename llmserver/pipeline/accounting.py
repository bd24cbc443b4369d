"""Accounting, on every ending of a request: the scheduler slot, the fair-share correction to the
real cost and exactly one usage draft. (The metrics hear the ending as an event.)"""

from __future__ import annotations

from typing import Protocol

from django.utils import timezone

from llmserver.cluster.transport import SchedulerTransport
from llmserver.runtime.pricing import Pricing
from llmserver.runtime.usage import UsageDraft
from scheduling import Ticket
from tenants.models import UsageStatus


class UsageRows(Protocol):
    """Where a request's usage draft goes to be priced and written (the `UsageWriter`)."""

    def add(self, draft: UsageDraft) -> None: ...


class Ledger:
    """Where a request's ending is recorded: the scheduler's slot and account, the usage rows."""

    def __init__(self, scheduler: SchedulerTransport, usage: UsageRows) -> None:
        self.scheduler, self.usage = scheduler, usage

    def settle(self, draft: UsageDraft, ticket: Ticket | None, pricing: Pricing) -> None:
        """`draft` holds the request's final status and tokens."""
        if ticket is not None:
            cost = pricing.charge(draft.model, draft.prompt_tokens, draft.completion_tokens)
            if draft.status == UsageStatus.OK:
                self.scheduler.complete(ticket, cost)
            else:
                self.scheduler.cancel(ticket, cost)
        draft.finished_at = timezone.now()
        self.usage.add(draft)
