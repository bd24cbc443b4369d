"""When PostgreSQL drops the gateway's connections, the next database job reconnects: keys still
resolve, limits are still checked, usage is still written, the config still reloads."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from typing import Any

import psycopg
import pytest
from asgiref.sync import sync_to_async
from django.db import connection

from tests.api.conftest import chat_body, read_all, start

TERMINATE = (
    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity"
    " WHERE datname = current_database() AND pid <> pg_backend_pid()"
)


@pytest.fixture
def fresh_main_connection(transactional_db: None) -> Iterator[None]:
    """The test's own connection is terminated too; drop it so the teardown flush reconnects."""
    yield
    connection.close()


@pytest.fixture
async def fresh_shared_thread_connection(fresh_main_connection: None) -> AsyncIterator[None]:
    """So is the connection of the thread `sync_to_async` shares across tests; drop it too, so
    the tests after this one do not meet it dead."""
    yield
    await sync_to_async(close_this_threads_connection)()


def close_this_threads_connection() -> None:
    connection.close()


def outside_connection() -> psycopg.Connection[Any]:
    s = connection.settings_dict
    return psycopg.connect(
        dbname=s["NAME"],
        user=s["USER"],
        host=s["HOST"] or None,
        port=s["PORT"] or None,
        password=s["PASSWORD"] or None,
        autocommit=True,
    )


def new_key_with_a_budget(tenant: Any) -> tuple[int, str]:
    from tenants.models import ApiKey, AppType

    tenant.monthly_budget = Decimal("100")
    tenant.save()
    key, secret = ApiKey.objects.create_key(tenant=tenant, user="dora", app_type=AppType.CHAT)
    return key.pk, secret


async def test_after_the_connections_are_terminated_a_new_key_is_served_and_billed(
    gateway, world, fresh_shared_thread_connection
):
    if connection.vendor != "postgresql":
        pytest.skip("pg_terminate_backend needs PostgreSQL; set DATABASE_URL to postgres")
    # One worker thread, so the jobs after the terminate meet a connection that was killed.
    asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(max_workers=1))
    status, _, _ = await read_all(await start(world["alice"], chat_body()))
    assert status == 200
    await gateway.usage.flush_once()
    key_id, secret = await sync_to_async(new_key_with_a_budget)(world["tenant"])
    with outside_connection() as pg:
        killed = pg.execute(TERMINATE).fetchall()
        assert killed

        status, _, body = await read_all(await start(secret, chat_body()))
        assert status == 200, body
        await gateway.reload_once()
        await gateway.usage.flush_once()
        assert (gateway.usage.pending, gateway.usage.failed) == (0, 0)
        query = "SELECT count(*) FROM tenants_usagerecord WHERE api_key_id = %s"
        assert pg.execute(query, (key_id,)).fetchone() == (1,)


async def test_a_statement_the_database_refuses_is_not_retried(transactional_db):
    from django.db import DatabaseError

    from llmserver.runtime.db import run_db

    calls = []

    def bad_query() -> None:
        calls.append(1)
        with connection.cursor() as cursor:
            cursor.execute("SELECT * FROM no_such_table")

    with pytest.raises(DatabaseError):
        await run_db(bad_query)
    assert calls == [1]
