"""The scheduler's state, sent to the live queue dashboards every PUBLISH_INTERVAL while it
changes, with the first-token times seen since (the dashboard's page and socket are
`llmserver.dashboard`; they read what is published here)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import asdict
from typing import Any

from channels.layers import get_channel_layer

from scheduling import SchedulerSnapshot

log = logging.getLogger(__name__)
GROUP = "dashboard"
PUBLISH_INTERVAL = 0.5
RECENT_TTFT_KEPT = 10_000

_latest: dict[str, Any] | None = None


def latest_snapshot() -> dict[str, Any] | None:
    """The last snapshot this process published, for a page that just connected."""
    return _latest


async def publish_snapshot(snapshot: dict[str, Any]) -> None:
    """Send one scheduler snapshot to every open dashboard."""
    global _latest
    _latest = snapshot
    layer = get_channel_layer()
    if layer is not None:
        await layer.group_send(GROUP, {"type": "dashboard.snapshot", "snapshot": snapshot})


class SnapshotPublisher:
    """`snapshot()` published while it changes and `publishing()` says this process should (in a
    cluster only the leader holds the queues: one publisher, not one per process)."""

    def __init__(
        self, snapshot: Callable[[], SchedulerSnapshot], publishing: Callable[[], bool]
    ) -> None:
        self._snapshot = snapshot
        self._publishing = publishing
        # (band, seconds) of first tokens since the last update; drained when published.
        self.recent_ttft: deque[tuple[int, float]] = deque(maxlen=RECENT_TTFT_KEPT)

    def first_token(self, band: int, seconds: float) -> None:
        self.recent_ttft.append((band, seconds))

    async def run(self) -> None:
        last: SchedulerSnapshot | None = None
        while True:
            await asyncio.sleep(PUBLISH_INTERVAL)
            if not self._publishing():
                continue
            snap = self._snapshot()
            if snap.same_state(last) and not self.recent_ttft:
                continue
            last = snap
            try:
                await publish_snapshot(
                    {**asdict(snap), "wall": time.time(), "ttft": self._drain_ttft()}
                )
            except Exception:
                log.exception("publishing the dashboard snapshot failed")

    def _drain_ttft(self) -> dict[int, dict[str, float]]:
        """Mean and max time to first token per band since the last update, for the charts;
        `/metrics` keeps the histograms."""
        per_band: dict[int, list[float]] = {}
        while self.recent_ttft:
            band, seconds = self.recent_ttft.popleft()
            per_band.setdefault(band, []).append(seconds)
        return {
            band: {"mean": sum(xs) / len(xs), "max": max(xs), "count": len(xs)}
            for band, xs in per_band.items()
        }
