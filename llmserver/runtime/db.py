"""Database work from the event loop, on worker threads, that survives a dropped connection.

Each worker thread keeps its own Django connection, and nothing in a worker thread runs Django's
request-cycle clean-up, so a connection the server dropped (a restart, `pg_terminate_backend`)
would stay broken in that thread for good. `run_db` runs the job, and on a connection error
closes the thread's connection and runs it once more on a fresh one.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import InterfaceError, OperationalError, connection

log = logging.getLogger(__name__)
P = ParamSpec("P")
T = TypeVar("T")


def _with_reconnect(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    try:
        return fn(*args, **kwargs)
    except (InterfaceError, OperationalError) as exc:
        if connection.in_atomic_block:
            raise
        log.warning("database connection lost (%s); reconnecting and trying once more", exc)
        connection.close()
        return fn(*args, **kwargs)


async def run_db(fn: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
    return await sync_to_async(_with_reconnect, thread_sensitive=False)(fn, *args, **kwargs)
