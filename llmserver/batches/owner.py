"""Whose requests a batch's lines are: the API key that created it, as the request path knows
a key (`KeyInfo`), then set to run as batch work.

Batch work runs on the batch band whatever the key's tier (it fills idle capacity and never
delays interactive users), may always be paused to make room (a whole answer restarts from its
queue; no client is streaming it), never pauses others, and waits in the queue as long as its
completion window lasts. Everything else is the key's: its rate limits, budget and quota, its
fair share, its usage rows.
"""

from __future__ import annotations

from dataclasses import replace

from llmserver.runtime.keys import KeyInfo, key_info
from scheduling import BATCH
from tenants.models import ApiKey


def owner_key(key_id: int | None) -> KeyInfo | None:
    """The key as the request path would resolve it now, or None when it can no longer be used
    (deleted, revoked, expired, or its tenant suspended). Runs in a worker thread.

    It is `llmserver.runtime.keys.load_key` from the key's id instead of its secret (a batch
    holds no secret); both build the same `key_info`."""
    if key_id is None:
        return None
    key = (
        ApiKey.objects.select_related("tenant", "tenant__default_tier", "tier_override")
        .filter(pk=key_id)
        .first()
    )
    if key is None or not key.is_usable():
        return None
    return key_info(key)


def as_batch_work(key: KeyInfo, window_left: float) -> KeyInfo:
    """`key` for a batch's lines: the batch band, pausable, waiting at most `window_left`
    seconds, whether their queue moves or not."""
    policy = replace(key.policy, preemptible=True, preempt_after=None)
    left = max(1.0, window_left)
    return replace(key, band=BATCH, policy=policy, queue_timeout=left, queue_window=left)


def lines_in_flight(key: KeyInfo, most: int) -> int:
    """How many of a batch's lines to have queued or running at once: at most `most`, and never
    so many that the key's user has no queue place left for a request of their own (the
    scheduler counts a principal's queued jobs across bands)."""
    policy = key.policy
    return max(1, min(most, policy.max_concurrent + max(0, policy.max_queued - 1)))
