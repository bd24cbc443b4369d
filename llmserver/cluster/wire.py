"""What crosses Redis between relays and the leader: jobs and messages as compact JSON.

Times never cross as clock readings (monotonic clocks differ between machines): a deadline goes
as the seconds left, an enqueue time as the seconds already waited, and the receiver puts them
on its own clock. Every message carries the sender's fencing token (`e`, the leader epoch).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from typing import Any

from scheduling import Job, Principal, TierPolicy, WithinPrincipal

# relay -> leader
SUBMIT = "submit"
REGISTER = "register"  # a job held across a change of leader: queued, or running on `backend`
COMPLETE = "complete"
CANCEL = "cancel"
REQUEUE = "requeue"
PREEMPTED = "preempted"  # the job gave up its slot when asked, and waits to resume
KEEP = "keep"  # the job declined an eviction (it cannot be resumed)
# leader -> relay
GRANT = "grant"
REJECT = "reject"
EVICT = "evict"  # give the slot back (preemption)
# leader -> everyone
LEADER = "leader"

# Reasons a leader refuses or ends a queued job.
QUEUE_FULL = "queue_full"
NO_BACKEND = "no_backend"
EXPIRED = "expired"


def encode_job(job: Job, now: float) -> dict[str, Any]:
    return {
        "id": job.id,
        "tenant": job.principal.tenant,
        "user": job.principal.user,
        "model": job.model,
        "band": job.band,
        "policy": asdict(job.policy),
        "cost": job.estimated_cost,
        "out": job.estimated_output_tokens,
        "in": job.estimated_prompt_tokens,
        "prefix": list(job.prefix_blocks),
        "left": None if job.deadline is None else job.deadline - now,
        "patience": job.patience,
        "demoted": job.demoted,
        "backends": None if job.backends is None else sorted(job.backends),
    }


def decode_job(data: dict[str, Any], now: float) -> Job:
    left = data["left"]
    return Job(
        id=data["id"],
        principal=Principal(data["tenant"], data["user"]),
        model=data["model"],
        band=int(data["band"]),
        policy=decode_policy(data["policy"]),
        estimated_cost=float(data["cost"]),
        estimated_output_tokens=int(data["out"]),
        estimated_prompt_tokens=int(data.get("in", 0)),
        prefix_blocks=tuple(int(b) for b in data["prefix"]),
        deadline=None if left is None else now + float(left),
        patience=None if data.get("patience") is None else float(data["patience"]),
        demoted=bool(data["demoted"]),
        backends=None if data["backends"] is None else frozenset(data["backends"]),
    )


def decode_policy(data: dict[str, Any]) -> TierPolicy:
    """The tier's policy as `asdict` wrote it: only its enum needs its type back."""
    within = data.get("within_principal")
    return TierPolicy(**{**data, "within_principal": within and WithinPrincipal(within)})


@dataclass(frozen=True, slots=True)
class Message:
    """One message: its type `t`, the sender's epoch `e`, and the rest as sent."""

    t: str
    e: int
    body: dict[str, Any]

    def encode(self) -> str:
        return json.dumps({"t": self.t, "e": self.e, **self.body}, separators=(",", ":"))

    @classmethod
    def decode(cls, raw: bytes | str) -> Message:
        data = json.loads(raw)
        return cls(str(data.pop("t")), int(data.pop("e")), data)
