"""Usage survives its key: a stream that ends after its key was deleted is still billed, its
row kept with the tenant and user, without the key."""

from __future__ import annotations

from asgiref.sync import sync_to_async

from tenants.models import ApiKey
from tests.api.conftest import chat_body, start, usage_rows, wait_for


async def test_a_stream_that_ends_after_its_key_was_deleted_is_still_billed(gateway, world):
    comm = await start(world["alice"], chat_body(max_tokens=300))
    assert (await comm.receive_output(10))["status"] == 200
    await sync_to_async(ApiKey.objects.all().delete)()
    while (await comm.receive_output(20)).get("more_body"):
        pass
    await wait_for(lambda: not gateway.inflight.tasks, 5)
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    assert (row["status"], row["user"], row["completion_tokens"]) == ("ok", "alice", 300)
    assert row["api_key_id"] is None and row["tenant_id"] == world["tenant"].pk
    assert gateway.usage.failed == 0
