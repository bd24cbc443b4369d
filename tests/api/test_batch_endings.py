"""Several batches ending at once on SQLite: each ends once, and the log says nothing failed
(`claims.finish` waits its turn for the database instead of failing the run)."""

from __future__ import annotations

import asyncio
import logging
import time
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.db import OperationalError
from django.utils import timezone

from llmserver.batches.storage import FileStore
from tenants.models import ApiKey, AppType, Band, Batch, FilePurpose, StoredFile, Tier
from tests.api.batch_helpers import FINAL, chat_line, jsonl


@pytest.fixture(autouse=True)
def batch_settings(world: dict[str, Any], settings: Any, tmp_path: Path) -> None:
    settings.LLMSERVER = {
        **settings.LLMSERVER,
        "FILES_DIR": str(tmp_path / "files"),
        "BATCH_POLL_INTERVAL": 0.05,
        "BATCH_MAX_ACTIVE": 8,
    }
    Tier.objects.create(name="batch", band=Band.BATCH, gate_max_waiting=0, gate_max_tpot_ms=None)


@pytest.fixture
def eight_batches(world: dict[str, Any], tmp_path: Path) -> None:
    """Eight one-line batches, there before the gateway's runner starts: its first look takes
    them all, and they end together."""
    roomy = Tier.objects.create(
        name="roomy",
        band=Band.INTERACTIVE,
        max_concurrent_per_user=8,
        max_queued_per_user=16,
        gate_max_waiting=8,
        gate_max_tpot_ms=None,
    )
    key, _ = ApiKey.objects.create_key(
        tenant=world["tenant"], user="bulk", tier_override=roomy, app_type=AppType.CHAT
    )
    store = FileStore(tmp_path / "files")
    store.ensure()
    for i in range(8):
        stored = StoredFile.objects.create(
            tenant=world["tenant"],
            api_key=key,
            user="bulk",
            filename="in.jsonl",
            purpose=FilePurpose.BATCH,
            storage_name=f"input-{i}",
        )
        store.path(stored.storage_name).write_bytes(jsonl([chat_line(f"{i}", max_tokens=2)]))
        Batch.objects.create(
            tenant=world["tenant"],
            api_key=key,
            user="bulk",
            endpoint="/v1/chat/completions",
            input_file_id=stored.pk,
            expires_at=timezone.now() + timedelta(hours=24),
        )


def statuses() -> list[str]:
    """Every batch's status, read as the test's own witness: the test database (SQLite in
    memory, one shared cache) refuses a read while a write holds the table, so it reads again."""
    while True:
        try:
            return list(Batch.objects.values_list("status", flat=True))
        except OperationalError:
            time.sleep(0.05)


async def test_batches_ending_together_each_complete_and_log_no_failure(
    eight_batches, gateway, caplog
):
    caplog.set_level(logging.WARNING)
    deadline = asyncio.get_running_loop().time() + 30
    while not set(found := await sync_to_async(statuses)()) <= FINAL:
        assert asyncio.get_running_loop().time() < deadline, found
        await asyncio.sleep(0.2)
    assert found == ["completed"] * 8
    complaints = [r.getMessage() for r in caplog.records if r.name.startswith("llmserver.batches")]
    assert complaints == []
