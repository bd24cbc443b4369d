"""/v1/files: a tenant's batch input files, uploaded, listed, read and deleted; nobody else's."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.core.exceptions import ImproperlyConfigured
from django.utils import timezone

from llmserver.batches.storage import FileStore
from tenants.models import ApiKey, AppType, StoredFile, Tenant
from tests.api.batch_helpers import call, call_json, chat_line, jsonl, multipart, upload

INPUT = jsonl([chat_line("a"), chat_line("b")])


@pytest.fixture(autouse=True)
def files_dir(world: dict[str, Any], settings: Any, tmp_path: Path) -> Path:
    where = tmp_path / "files"
    settings.LLMSERVER = {**settings.LLMSERVER, "FILES_DIR": str(where), "FILES_MAX_BYTES": 4096}
    return where


@pytest.fixture
def charlie(world: dict[str, Any]) -> str:
    """A key of another tenant, who must see nothing of acme's."""
    globex = Tenant.objects.create(name="Globex", slug="globex", default_tier=world["tier"])
    _, secret = ApiKey.objects.create_key(tenant=globex, user="charlie", app_type=AppType.CHAT)
    return secret


async def test_an_upload_answers_the_file_object_and_keeps_the_bytes(gateway, world, files_dir):
    status, uploaded = await upload(world["alice"], INPUT)
    assert status == 200
    assert uploaded["object"] == "file" and uploaded["id"].startswith("file-")
    assert uploaded["purpose"] == "batch" and uploaded["bytes"] == len(INPUT)
    assert uploaded["filename"] == "in.jsonl"
    row = await sync_to_async(StoredFile.objects.get)(pk=uploaded["id"])
    assert (row.tenant_id, row.user, row.bytes) == (world["tenant"].pk, "alice", len(INPUT))
    assert (files_dir / row.storage_name).read_bytes() == INPUT


async def test_the_list_shows_the_tenants_files_newest_first(gateway, world):
    _, first = await upload(world["alice"], INPUT)
    _, second = await upload(world["alice"], INPUT)
    status, listed = await call_json("GET", "/v1/files", world["alice"])
    assert status == 200 and listed["object"] == "list"
    assert [f["id"] for f in listed["data"]] == [second["id"], first["id"]]
    assert listed["has_more"] is False


async def test_the_list_pages_with_after_and_limit(gateway, world):
    ids = [(await upload(world["alice"], INPUT))[1]["id"] for _ in range(3)]
    _, page = await call_json("GET", "/v1/files", world["alice"], query="limit=2")
    assert [f["id"] for f in page["data"]] == ids[:0:-1] and page["has_more"] is True
    query = f"limit=2&after={page['last_id']}"
    _, rest = await call_json("GET", "/v1/files", world["alice"], query=query)
    assert [f["id"] for f in rest["data"]] == ids[:1] and rest["has_more"] is False


async def test_a_file_is_got_by_its_id(gateway, world):
    _, uploaded = await upload(world["alice"], INPUT)
    status, got = await call_json("GET", f"/v1/files/{uploaded['id']}", world["alice"])
    assert status == 200 and got == uploaded


async def test_the_content_is_the_bytes_uploaded(gateway, world):
    _, uploaded = await upload(world["alice"], INPUT)
    status, headers, body = await call("GET", f"/v1/files/{uploaded['id']}/content", world["alice"])
    assert status == 200 and body == INPUT
    assert headers[b"content-length"] == str(len(INPUT)).encode()


async def test_a_deleted_file_is_gone_from_the_store_and_the_database(gateway, world, files_dir):
    _, uploaded = await upload(world["alice"], INPUT)
    row = await sync_to_async(StoredFile.objects.get)(pk=uploaded["id"])
    status, deleted = await call_json("DELETE", f"/v1/files/{uploaded['id']}", world["alice"])
    assert status == 200
    assert deleted == {"id": uploaded["id"], "object": "file", "deleted": True}
    assert not await sync_to_async(StoredFile.objects.filter(pk=uploaded["id"]).exists)()
    assert not (files_dir / row.storage_name).exists()
    status, _ = await call_json("GET", f"/v1/files/{uploaded['id']}", world["alice"])
    assert status == 404


@pytest.mark.parametrize(("method", "suffix"), [("GET", ""), ("GET", "/content"), ("DELETE", "")])
async def test_another_tenant_gets_404_for_a_file(gateway, world, charlie, method, suffix):
    _, uploaded = await upload(world["alice"], INPUT)
    status, error = await call_json(method, f"/v1/files/{uploaded['id']}{suffix}", charlie)
    assert status == 404 and error["error"]["code"] == "not_found"
    assert await sync_to_async(StoredFile.objects.filter(pk=uploaded["id"]).exists)()


async def test_another_tenant_lists_none_of_them(gateway, world, charlie):
    await upload(world["alice"], INPUT)
    _, listed = await call_json("GET", "/v1/files", charlie)
    assert listed["data"] == []


async def test_a_purpose_other_than_batch_is_refused(gateway, world, files_dir):
    status, error = await upload(world["alice"], INPUT, purpose="fine-tune")
    assert status == 400 and error["error"]["param"] == "purpose"
    assert await sync_to_async(StoredFile.objects.count)() == 0
    assert [p for p in files_dir.iterdir() if p.is_file()] == []


async def test_a_file_that_is_not_jsonl_is_refused(gateway, world):
    status, error = await upload(world["alice"], b'{"custom_id": "a"}\nnot json\n')
    assert status == 400 and "line 2" in error["error"]["message"]
    assert await sync_to_async(StoredFile.objects.count)() == 0


async def test_a_file_over_the_size_limit_is_refused_with_413(gateway, world, files_dir):
    status, error = await upload(world["alice"], jsonl([chat_line(str(i)) for i in range(40)]))
    assert status == 413 and error["error"]["code"] == "file_too_large"
    assert await sync_to_async(StoredFile.objects.count)() == 0


async def test_a_file_with_more_lines_than_a_batch_takes_is_refused(gateway, world, settings):
    settings.LLMSERVER = {**settings.LLMSERVER, "BATCH_MAX_LINES": 1}
    from llmserver.process import reset_gateway

    await reset_gateway()  # the settings are read when the gateway starts
    status, error = await upload(world["alice"], INPUT)
    assert status == 400 and "more than 1 lines" in error["error"]["message"]


async def test_an_upload_without_a_form_file_is_refused(gateway, world):
    body = b'--x\r\nContent-Disposition: form-data; name="purpose"\r\n\r\nbatch\r\n--x--\r\n'
    status, error = await call_json(
        "POST",
        "/v1/files",
        world["alice"],
        body=body,
        content_type="multipart/form-data; boundary=x",
    )
    assert status == 400 and error["error"]["param"] == "file"


async def test_an_upload_without_a_key_is_refused_and_stores_nothing(gateway, world, files_dir):
    body, content_type = multipart(INPUT)
    status, error = await call_json("POST", "/v1/files", None, body=body, content_type=content_type)
    assert status == 401 and error["error"]["code"] == "invalid_api_key"
    assert not files_dir.exists() or not any(files_dir.rglob("*.jsonl"))


def test_a_files_dir_inside_the_static_root_is_refused(settings, tmp_path):
    settings.STATIC_ROOT = str(tmp_path / "static")
    with pytest.raises(ImproperlyConfigured, match="FILES_DIR"):
        FileStore(tmp_path / "static" / "files")


def test_a_storage_name_cannot_leave_the_store(tmp_path):
    with pytest.raises(ValueError):
        FileStore(tmp_path).path("../elsewhere")


def test_the_file_object_has_openais_fields():
    from openai.types import FileObject

    from llmserver.batches.objects import file_object

    row = StoredFile(id="file-x", filename="in.jsonl", purpose="batch", bytes=3, storage_name="x")
    row.created_at = timezone.now()
    assert FileObject.model_validate(file_object(row)).id == "file-x"
    assert json.dumps(file_object(row))


async def test_a_filename_longer_than_a_file_name_may_be_is_refused_naming_the_limit(
    gateway, world, settings, files_dir
):
    # The body may hold the name: only the name is too long.
    settings.LLMSERVER = {**settings.LLMSERVER, "FILES_MAX_BYTES": 200_000}
    from llmserver.process import reset_gateway

    await reset_gateway()  # the settings are read when the gateway starts
    body, content_type = multipart(INPUT, filename="a" * 100_000 + ".jsonl")
    status, refused = await call_json(
        "POST", "/v1/files", world["alice"], body=body, content_type=content_type
    )
    assert status == 400
    error = refused["error"]
    assert (error["param"], error["code"]) == ("file", "filename_too_long")
    assert "255" in error["message"]
    assert await sync_to_async(StoredFile.objects.count)() == 0
    assert not list(files_dir.glob("file-*"))


async def test_a_filename_of_256_characters_is_refused_rather_than_cut(gateway, world, files_dir):
    body, content_type = multipart(INPUT, filename="a" * 250 + ".jsonl")
    status, refused = await call_json(
        "POST", "/v1/files", world["alice"], body=body, content_type=content_type
    )
    assert status == 400 and refused["error"]["code"] == "filename_too_long"
    assert await sync_to_async(StoredFile.objects.count)() == 0
