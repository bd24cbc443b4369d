"""The gateway prunes by itself: no timer for an operator to remember."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async

from llmserver.runtime.gateway import Gateway
from llmserver.runtime.pruning import UsagePruner
from tenants.models import StoredResponse, UsageRecord
from tenants.retention import cutoff
from tests.retention.world import NOW, spread

pytestmark = pytest.mark.django_db(transaction=True)


async def test_one_pass_deletes_every_record_past_the_retention(cast: Any) -> None:
    await sync_to_async(spread)(cast)
    old = await UsageRecord.objects.filter(queued_at__lt=cutoff(NOW, 2)).acount()
    assert await UsagePruner(2, now=lambda: NOW).prune_once() == old > 0
    assert not await UsageRecord.objects.filter(queued_at__lt=cutoff(NOW, 2)).aexists()


def test_the_gateway_prunes_at_the_configured_retention(settings: Any) -> None:
    settings.LLMSERVER = {**settings.LLMSERVER, "USAGE_RETENTION_DAYS": 400}
    assert Gateway().pruner.days == 400


async def test_one_pass_forgets_the_responses_past_their_retention(cast: Any) -> None:
    def keep(name: str, expires: Any) -> None:
        StoredResponse.objects.create(
            id=name, tenant=cast.acme, user="alice", model="m", conversation=[], expires_at=expires
        )

    await sync_to_async(keep)("resp_old", NOW - timedelta(seconds=1))
    await sync_to_async(keep)("resp_new", NOW + timedelta(days=1))
    await UsagePruner(2, now=lambda: NOW).prune_once()
    kept = [r async for r in StoredResponse.objects.values_list("id", flat=True)]
    assert kept == ["resp_new"]
