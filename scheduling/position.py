"""Where a queued job stands: how many jobs go before it in its band and pool.

Read-only and pure, for clients that want to see that they are queued (`: queued position=N`
SSE comments, the WebSocket's `queued` event, `GET /v1/requests/{id}`). Cost: O(jobs in the
job's band and pool), never the whole scheduler.

The count follows the scheduler's own order: strict bands, so only the job's (model, band)
matters (a higher band may still overtake it later: the position is a lower bound then); inside
the band, the lane with the least service goes next and each dispatch adds the job's charge, so
every other backlogged lane sends before this job those of its jobs whose turn (its service
plus one charge per job before them) comes earlier. Exact while nothing new arrives and the
estimates hold; an estimate otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass

from scheduling.core import Scheduler
from scheduling.lanes import QUEUED, Lane

QUEUED_STATE = "queued"
RUNNING_STATE = "running"


@dataclass(frozen=True, slots=True)
class QueuePosition:
    """`position` is 0 for the next job to go; `running` is the pool's jobs in flight now."""

    state: str
    model: str
    band: int
    position: int
    running: int


def queue_position(scheduler: Scheduler, job_id: str) -> QueuePosition | None:
    """The job's position, or None when the scheduler no longer knows it (finished)."""
    entry = scheduler.entries.get(job_id)
    if entry is None or entry.lane is None:
        return None
    lane = entry.lane
    running = sum(s.in_flight for s in scheduler.backends.values() if lane.model in s.config.models)
    if entry.state != QUEUED:
        return QueuePosition(RUNNING_STATE, lane.model, lane.band, 0, running)
    own = lane.queue.ahead(entry)
    mine = _turn(
        lane.service, own, _charge(entry.job.estimated_cost, entry.job.policy.weight), lane
    )
    others = 0
    heap = scheduler.heaps.get((lane.model, lane.band))  # read only, never changed here
    for other in heap.lanes() if heap is not None else ():
        if other is lane:
            continue
        head = other.queue.peek()  # drops only entries already gone (lazy deletion)
        charge = _charge(head.job.estimated_cost, head.job.policy.weight) if head else 1.0
        for j in range(other.live):
            if _turn(other.service, j, charge, other) >= mine:
                break
            others += 1
    return QueuePosition(QUEUED_STATE, lane.model, lane.band, own + others, running)


def _charge(cost: float, weight: float) -> float:
    return cost / max(weight, 1e-9)  # what the scheduler adds to a lane's service per dispatch


def _turn(service: float, j: int, charge: float, lane: Lane) -> tuple[float, int, int]:
    """When a lane's j-th queued job is served, in the fair-share heap's order: its service then;
    at equal service a lane already at that level goes first in the order it was pushed, and
    one that gets there by being served is pushed after those."""
    return (round(service + j * charge, 9), 0 if j == 0 else 1, lane.token or 0)
