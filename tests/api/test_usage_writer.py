"""The usage writer: one bad record never stops usage for everyone, and nothing is skipped
silently. A batch that fails is split until the bad row stands alone; that row is logged once,
counted as failed and dropped; the others are written."""

from __future__ import annotations

import logging
import uuid
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import connection
from django.utils import timezone

from llmserver.runtime.usage import UsageDraft, UsageWriter
from tests.api.conftest import usage_rows


def draft(world: dict[str, Any], **fields: Any) -> UsageDraft:
    values: dict[str, Any] = {
        "request_id": "chatcmpl-" + uuid.uuid4().hex[:24],
        "tenant_id": world["tenant"].pk,
        "tenant_slug": "acme",
        "api_key_id": None,
        "user": "alice",
        "model": "demo-llama",
        "tier": "tight",
        "band": 0,
        "queued_at": timezone.now(),
        **fields,
    }
    return UsageDraft(**values)


def needs_postgresql() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the defect is PostgreSQL's (column widths, NUL); set DATABASE_URL to postgres")


async def test_a_duplicate_request_id_is_counted_as_failed_and_the_rest_are_written(world, caplog):
    writer = UsageWriter(batch_size=500)
    first = draft(world)
    writer.add(first)
    await writer.flush_once()
    good = [draft(world) for _ in range(5)]
    for d in good[:2]:
        writer.add(d)
    writer.add(draft(world, request_id=first.request_id))
    for d in good[2:]:
        writer.add(d)
    with caplog.at_level(logging.ERROR, "llmserver.runtime.usage"):
        await writer.flush_once()
        await writer.flush_once()
    assert (writer.pending, writer.failed, writer.written) == (0, 1, 6)
    assert [r.levelno for r in caplog.records].count(logging.ERROR) == 1
    ids = {r["request_id"] for r in await usage_rows()}
    assert ids == {first.request_id, *(d.request_id for d in good)}


async def test_a_lone_surrogate_or_nul_in_a_draft_is_replaced_and_the_row_written(world):
    writer = UsageWriter()
    writer.add(draft(world, model="\ud800x", user="a\x00b", error_type="e\udfff"))
    writer.add(draft(world))
    await writer.flush_once()
    assert (writer.pending, writer.failed, writer.written) == (0, 0, 2)
    rows = await usage_rows()
    assert {(r["model"], r["user"]) for r in rows} == {
        ("\ufffdx", "a\ufffdb"),
        ("demo-llama", "alice"),
    }


async def test_strings_longer_than_their_columns_are_clipped(world):
    writer = UsageWriter()
    long = draft(world, model="m" * 200, user="u" * 200, backend="b" * 100, tier="t" * 100)
    writer.add(long)
    await writer.flush_once()
    [row] = await usage_rows()
    widths = (len(row["model"]), len(row["user"]), len(row["backend"]), len(row["tier"]))
    assert widths == (128, 128, 64, 64)


async def test_on_postgresql_a_model_too_long_or_with_nul_does_not_stop_usage(world):
    await sync_to_async(needs_postgresql)()
    writer = UsageWriter()
    writer.add(draft(world, model="m" * 129))
    writer.add(draft(world, model="a\x00b"))
    writer.add(draft(world, request_id="ws-1-140680410083664-" + "x" * 50))
    after = draft(world)
    writer.add(after)
    await writer.flush_once()
    assert writer.pending == 0
    assert after.request_id in {r["request_id"] for r in await usage_rows()}


async def test_metrics_show_usage_pending_and_failed(gateway, world):
    first = draft(world)
    gateway.usage.add(first)
    await gateway.usage.flush_once()
    gateway.usage.add(draft(world, request_id=first.request_id))
    await gateway.usage.flush_once()
    gateway.usage.add(draft(world))
    text = gateway.telemetry.metrics.render().decode()
    assert "llmserver_usage_failed_total 1.0" in text
    assert "llmserver_usage_pending 1.0" in text


async def test_stopping_the_writer_mid_flush_writes_each_row_once(world):
    """Shutdown cancels the writer's loop; a write already committing must not be written again
    by the final flush (it was, and the duplicates were then dropped as failed)."""
    import asyncio

    writer = UsageWriter(interval=0.0, batch_size=100)
    drafts = [draft(world) for _ in range(1000)]
    for d in drafts:
        writer.add(d)
    loop = asyncio.create_task(writer.run())
    while not writer._lock.locked():
        await asyncio.sleep(0)
    await asyncio.sleep(0.01)  # a batch is on its worker thread
    loop.cancel()
    with pytest.raises(asyncio.CancelledError):
        await loop
    await writer.flush_once()
    assert (writer.pending, writer.failed, writer.written) == (0, 0, 1000)
    assert len(await usage_rows()) == 1000
