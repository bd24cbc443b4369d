"""Batching similar requests: a queued job whose prompt shares a long prefix with the job just
dispatched may go right after it, to the same backend, whose prefix cache then serves all but
the first (vLLM: `KVCacheManager.get_computed_blocks` in `vllm/v1/core/kv_cache_manager.py`
finds the cached blocks when the request is scheduled).

Fair share bounds it: the job may jump ahead of less-served principals only while its own
principal's weighted service is within `slack` of the least served one's (the virtual token
counter's account), so no principal gets more than `slack` ahead by batching.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from scheduling.lanes import Lane


def shared_blocks(a: Sequence[int], b: Sequence[int]) -> int:
    """How many leading blocks two prompts share (chained hashes: equal at i means equal up to
    i)."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def pull_forward(
    least: Lane, lanes: Iterable[Lane], last_blocks: Sequence[int], slack: float, min_blocks: int
) -> Lane | None:
    """Among backlogged `lanes`, the least-served one whose head job shares at least
    `min_blocks` leading blocks with `last_blocks` and whose service is within `slack` of
    `least`'s (the least served); None when `least` itself qualifies or none does."""
    if slack <= 0 or len(last_blocks) < min_blocks or _similar(least, last_blocks, min_blocks):
        return None
    best: Lane | None = None
    for lane in lanes:
        if lane.service > least.service + slack or not _similar(lane, last_blocks, min_blocks):
            continue
        if best is None or lane.service < best.service:
            best = lane
    return best


def _similar(lane: Lane, last_blocks: Sequence[int], min_blocks: int) -> bool:
    head = lane.queue.peek()
    return head is not None and shared_blocks(head.job.prefix_blocks, last_blocks) >= min_blocks
