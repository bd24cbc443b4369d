"""The one way the gateway runs database work from async code: on a worker thread, with a
connection checked first and replaced once if it turns out dead.

Django checks connections at the start and end of each request (`close_old_connections`, which
honours `CONN_MAX_AGE` and `CONN_HEALTH_CHECKS`). The gateway's database work does not run inside
Django requests but on worker threads that keep their connection for the life of the process, so
without this a connection PostgreSQL dropped (a restart, a failover, `pg_terminate_backend`)
would fail every job on that thread until the gateway restarted.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import InterfaceError, OperationalError, close_old_connections, connection

log = logging.getLogger(__name__)
P = ParamSpec("P")
R = TypeVar("R")


def _connection_lost() -> bool:
    """After a database error: is the connection itself gone (not just the statement refused)?"""
    return connection.connection is None or not connection.is_usable()


def call_with_live_connection(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """Run `fn` on this thread's connection, checked first; on a connection error, reconnect and
    run it once more. `fn` must be safe to repeat: a job whose transaction died with the
    connection was rolled back."""
    close_old_connections()
    try:
        return fn(*args, **kwargs)
    except (OperationalError, InterfaceError):
        if connection.in_atomic_block or not _connection_lost():
            raise
        log.warning("the database connection was lost; reconnecting and retrying once")
        connection.close()
    return fn(*args, **kwargs)


# One pool of worker threads for the process's database work, the size of asyncio's default
# executor: each thread keeps its connection, so the gateway holds at most this many however
# many event loops come and go (each loop's default executor brought threads, and connections,
# of its own: a test suite's loops ran PostgreSQL out of connections).
_WORKERS = ThreadPoolExecutor(
    max_workers=min(32, (os.cpu_count() or 1) + 4), thread_name_prefix="llmserver-db"
)


async def run_db(fn: Callable[P, R], *args: P.args, **kwargs: P.kwargs) -> R:
    """`fn(*args, **kwargs)` on a worker thread, with a live connection (see the module)."""
    return await sync_to_async(
        call_with_live_connection, thread_sensitive=False, executor=_WORKERS
    )(fn, *args, **kwargs)
