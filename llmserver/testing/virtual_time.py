"""An asyncio event loop whose clock jumps to its next timer instead of waiting for it.

A simulated engine driven on it runs a minute of its time in a fraction of a second, and the
same way on a quiet laptop as on a loaded CI machine: nothing it measures depends on when the
operating system gives the process a core. For code that only sleeps and schedules (no
sockets, no threads): a loop with nothing to run and no timer waits as a real one does.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


class _Skipping(selectors.SelectSelector):
    """Polls without blocking; where nothing is ready, the loop's clock jumps by the time
    the loop would have waited (to its next timer)."""

    def __init__(self, loop: VirtualTimeLoop) -> None:
        super().__init__()
        self._loop = loop

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None:
            return super().select(None)
        ready = super().select(0)
        if not ready and timeout > 0:
            self._loop.advance(timeout)
        return ready


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    """`time()` starts at 0 and moves only by the waits the loop skips."""

    def __init__(self) -> None:
        self._now = 0.0
        super().__init__(_Skipping(self))

    def time(self) -> float:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += seconds


def run_in_virtual_time(coro: Coroutine[Any, Any, T]) -> T:
    """Run `coro` to its end on a fresh `VirtualTimeLoop`."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(coro)
    finally:
        loop.close()
