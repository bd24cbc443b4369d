"""On SQLite a key check reads while the usage writer is mid-transaction: the gateway's worker
threads share one database file, and a read that failed there failed a client's request."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, transaction

from tenants.models import ApiKey

pytestmark = pytest.mark.skipif(
    connection.vendor != "sqlite", reason="SQLite's locking, not PostgreSQL's"
)


def test_a_key_is_read_while_another_thread_holds_a_write_on_its_table(transactional_db, cast):
    written = threading.Event()
    read = threading.Event()
    failures: list[BaseException] = []

    def writer() -> None:
        try:
            with transaction.atomic():
                ApiKey.objects.filter(pk=cast.alice.pk).update(revoked=False)
                written.set()
                read.wait(timeout=5)
        finally:
            written.set()
            connection.close()

    def reader() -> None:
        try:
            written.wait(timeout=5)
            assert ApiKey.objects.filter(user="alice").count() == 1
        except BaseException as error:
            failures.append(error)
        finally:
            read.set()
            connection.close()

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=10)
    assert failures == []
