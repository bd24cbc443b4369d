"""The process's one gateway, started on first use in the running loop, with the Batch API's
runner beside it.

The runner drives completions through the pipeline, which stands on the gateway; so the two are
put together here, above both, rather than by the gateway itself.
"""

from __future__ import annotations

import asyncio

from llmserver.batches.runner import BatchRunner
from llmserver.runtime.gateway import Gateway

_gateway: Gateway | None = None
_batches: BatchRunner | None = None
_tasks: set[asyncio.Task[None]] = set()
_starting: asyncio.Lock | None = None


async def get_gateway() -> Gateway:
    """The process's gateway, started (with its batch runner) on first use."""
    global _gateway, _batches, _starting
    if _gateway is not None and _gateway.started:
        return _gateway
    if _starting is None:
        _starting = asyncio.Lock()
    async with _starting:
        if _gateway is None or not _gateway.started:
            gateway = Gateway()
            await gateway.start()
            runner = BatchRunner(gateway)
            task = asyncio.create_task(runner.run())
            _tasks.add(task)
            task.add_done_callback(_tasks.discard)
            _gateway, _batches = gateway, runner
            _register_shutdown()
    return _gateway


def current_gateway() -> Gateway | None:
    return _gateway


def current_batch_runner() -> BatchRunner | None:
    return _batches


async def reset_gateway() -> None:
    """Stop and forget the process's gateway (tests, and shutdown). The batch runner stops first:
    the usage of the lines it cuts is written by the gateway's last flush."""
    global _gateway, _batches, _starting
    gateway, runner, _gateway, _batches, _starting = _gateway, _batches, None, None, None
    if runner is not None:
        await runner.stop()
    for task in list(_tasks):
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    if gateway is not None:
        await gateway.stop()


def _register_shutdown() -> None:
    """Under daphne (Twisted), flush usage and close clients before the reactor stops."""
    try:
        from twisted.internet import reactor
    except ImportError:
        return
    if not getattr(reactor, "running", False):
        return
    from twisted.internet.defer import Deferred

    def before_shutdown() -> Deferred[None]:
        return Deferred.fromFuture(asyncio.ensure_future(reset_gateway()))

    reactor.addSystemEventTrigger("before", "shutdown", before_shutdown)  # type: ignore[arg-type]
