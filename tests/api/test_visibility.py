"""Inside a tenant a key sees its user's files and batches, and a tenant administrator's own key
sees the tenant's (`tenants/visibility.py`); the lists say the same as the ids."""

from __future__ import annotations

import json

from asgiref.sync import sync_to_async

from tenants.models import ApiKey, Membership, Role
from tests.api.batch_helpers import call_json, chat_line, create_batch, jsonl, upload
from tests.api.conftest import AcmeCast, wait_for


async def listed(key: str | None, path: str) -> set[str]:
    status, page = await call_json("GET", path, key)
    assert status == 200, page
    return {item["id"] for item in page["data"]}


async def test_a_second_user_lists_none_of_the_first_users_files(gateway, acme_cast: AcmeCast):
    _, alices = await upload(acme_cast.keys["owner"] or "", jsonl([chat_line("a")]))
    _, bobs = await upload(acme_cast.keys["same_tenant"] or "", jsonl([chat_line("b")]))
    assert await listed(acme_cast.keys["same_tenant"], "/v1/files") == {bobs["id"]}
    assert await listed(acme_cast.keys["owner"], "/v1/files") == {alices["id"]}


async def test_the_tenant_administrators_key_lists_every_users_files(gateway, acme_cast: AcmeCast):
    _, alices = await upload(acme_cast.keys["owner"] or "", jsonl([chat_line("a")]))
    _, bobs = await upload(acme_cast.keys["same_tenant"] or "", jsonl([chat_line("b")]))
    assert await listed(acme_cast.keys["tenant_admin"], "/v1/files") == {alices["id"], bobs["id"]}
    assert await listed(acme_cast.keys["other_tenant"], "/v1/files") == set()


async def test_a_second_user_lists_none_of_the_first_users_batches(gateway, acme_cast: AcmeCast):
    batch = await create_batch(acme_cast.keys["owner"] or "", [chat_line("a")])
    assert await listed(acme_cast.keys["same_tenant"], "/v1/batches") == set()
    assert await listed(acme_cast.keys["tenant_admin"], "/v1/batches") == {batch["id"]}


async def test_a_batch_cannot_be_made_from_another_users_file(gateway, acme_cast: AcmeCast):
    _, alices = await upload(acme_cast.keys["owner"] or "", jsonl([chat_line("a")]))
    request = {
        "input_file_id": alices["id"],
        "endpoint": "/v1/chat/completions",
        "completion_window": "24h",
    }
    status, body = await call_json(
        "POST",
        "/v1/batches",
        acme_cast.keys["same_tenant"],
        body=json.dumps(request).encode(),
        content_type="application/json",
    )
    assert status == 404 and body["error"]["code"] == "not_found", body


async def test_a_key_an_administrator_made_for_someone_else_sees_only_theirs(gateway, acme_cast):
    await upload(acme_cast.keys["owner"] or "", jsonl([chat_line("a")]))
    ada = acme_cast.people["tenant_admin"]
    _, for_bob = await sync_to_async(ApiKey.objects.create_key)(
        tenant=acme_cast.tenant, user="bob", owner=ada
    )
    assert await listed(for_bob, "/v1/files") == set()


async def test_a_demoted_administrators_key_sees_only_their_own_at_once(
    gateway, acme_cast: AcmeCast
):
    await upload(acme_cast.keys["owner"] or "", jsonl([chat_line("a")]))
    assert len(await listed(acme_cast.keys["tenant_admin"], "/v1/files")) == 1
    generation = gateway.keys.generation
    # By SQL, as a shell would: no signal, only the database's own count of the change.
    demote = Membership.objects.filter(user=acme_cast.people["tenant_admin"]).update
    await sync_to_async(demote)(role=Role.MEMBER)
    await wait_for(lambda: gateway.keys.generation != generation, 5.0)
    assert await listed(acme_cast.keys["tenant_admin"], "/v1/files") == set()
