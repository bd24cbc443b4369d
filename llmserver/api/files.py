"""`/v1/files`, as OpenAI has it, for the Batch API's input and output.

POST uploads a JSONL file for `purpose=batch` (multipart, up to `FILES_MAX_BYTES`); GET lists
the tenant's files, `/v1/files/{id}` is one (GET, DELETE) and `/v1/files/{id}/content` its
bytes, streamed from the store. A file is its user's: their keys and their tenant
administrator's see it (`tenants/visibility.py`); any other key gets 404 as for an id that does
not exist.
"""

from __future__ import annotations

import asyncio
from typing import IO, Any

from llmserver.api.bodies import SpooledBodyConsumer, header
from llmserver.batches import records
from llmserver.batches.objects import file_object, list_object
from llmserver.batches.storage import FileStore
from llmserver.batches.upload import receive_upload
from llmserver.batches.validation import check_jsonl
from llmserver.conf import GatewaySettings
from llmserver.runtime.db import run_db
from llmserver.runtime.keys import KeyInfo
from llmserver.wire.errors import ApiError, file_too_large, invalid, unsupported_purpose
from tenants.models import FilePurpose
from tenants.models.batches import new_file_id

# A form's own bytes around the file: boundaries, part headers, the purpose field.
FORM_OVERHEAD = 64 * 1024
MAX_LIST = 10_000


def page_from(query: dict[str, str], default: int, most: int) -> records.Page:
    """`after`, `limit` and `order` of a list request."""
    raw = query.get("limit", "")
    limit = default
    if raw:
        if not raw.isdigit() or not 1 <= int(raw) <= most:
            raise invalid(f"'limit' must be a whole number from 1 to {most}.", "limit")
        limit = int(raw)
    order = query.get("order", "desc")
    if order not in ("asc", "desc"):
        raise invalid("'order' must be 'asc' or 'desc'.", "order")
    return records.Page(query.get("after") or None, limit, order == "asc")


class FilesConsumer(SpooledBodyConsumer):
    """POST /v1/files (an upload) and GET /v1/files (the files the key sees)."""

    methods = ("GET", "HEAD", "POST")

    def body_limit(self, conf: GatewaySettings) -> int:
        if self.scope["method"] == "POST":
            return conf.files_max_bytes + FORM_OVERHEAD
        return conf.max_body_bytes

    def spool_dir(self, conf: GatewaySettings) -> str | None:
        if self.scope["method"] != "POST":
            return None  # nothing to spool: the store's folders are made by a first upload
        return str(FileStore(conf.files_dir).spool_dir())

    def too_large(self, limit: int) -> ApiError:
        return file_too_large(limit - FORM_OVERHEAD)

    async def respond(
        self, conf: GatewaySettings, key: KeyInfo, body: IO[bytes], size: int
    ) -> None:
        if self.scope["method"] == "POST":
            await self.send_json(200, await self.upload(conf, key, body, size))
            return
        query = self.query()
        page = page_from(query, MAX_LIST, MAX_LIST)
        found, more = await run_db(records.list_files, key, query.get("purpose") or None, page)
        await self.send_json(200, list_object([file_object(f) for f in found], more))

    async def upload(
        self, conf: GatewaySettings, key: KeyInfo, body: IO[bytes], size: int
    ) -> dict[str, Any]:
        store = FileStore(conf.files_dir)
        file_id = new_file_id()
        store.ensure()
        dest = store.path(file_id)
        content_type = header(self.scope, b"content-type") or ""
        upload = await asyncio.to_thread(
            receive_upload, body, size, content_type, dest, conf.files_max_bytes
        )
        try:
            if upload.purpose != FilePurpose.BATCH:
                raise unsupported_purpose(upload.purpose)
            await asyncio.to_thread(check_jsonl, dest, conf.batch_max_lines, conf.max_body_bytes)
            stored = await run_db(
                records.create_file,
                key,
                file_id,
                upload.filename,
                upload.purpose,
                upload.size,
                file_id,
            )
        except BaseException:
            dest.unlink(missing_ok=True)
            raise
        return file_object(stored)


class FileConsumer(SpooledBodyConsumer):
    """GET /v1/files/{file_id}: the file object; DELETE: the file, gone."""

    methods = ("GET", "HEAD", "DELETE")

    async def respond(
        self, conf: GatewaySettings, key: KeyInfo, body: IO[bytes], size: int
    ) -> None:
        file_id = self.route_arg("file_id")
        if self.scope["method"] != "DELETE":
            await self.send_json(200, file_object(await run_db(records.get_file, key, file_id)))
            return
        storage_name = await run_db(records.delete_file, key, file_id)
        await asyncio.to_thread(FileStore(conf.files_dir).delete, storage_name)
        await self.send_json(200, {"id": file_id, "object": "file", "deleted": True})


class FileContentConsumer(SpooledBodyConsumer):
    """GET /v1/files/{file_id}/content: the file's bytes, streamed from the store."""

    async def respond(
        self, conf: GatewaySettings, key: KeyInfo, body: IO[bytes], size: int
    ) -> None:
        stored = await run_db(records.get_file, key, self.route_arg("file_id"))
        store = FileStore(conf.files_dir)
        length = await asyncio.to_thread(store.size, stored.storage_name)
        await self.send_headers(
            status=200,
            headers=[
                (b"content-type", b"application/octet-stream"),
                (b"content-length", str(length).encode()),
                (b"content-disposition", _attachment(stored.filename)),
            ],
        )
        if self.scope["method"] == "HEAD":
            await self.send_body(b"")
            return
        chunks = store.chunks(stored.storage_name)
        sent = 0
        while sent < length and (chunk := await asyncio.to_thread(next, chunks, b"")):
            chunk = chunk[: length - sent]  # what the header promised, if it grew since
            sent += len(chunk)
            await self.send_body(chunk, more_body=True)
        chunks.close()
        await self.send_body(b"")


def _attachment(filename: str) -> bytes:
    """The file's name for a download; the client gave it, so nothing in it may end the
    header or the quoted string."""
    safe = "".join(c if c.isprintable() and c not in '"\\' else "_" for c in filename)
    return f'attachment; filename="{safe}"'.encode("latin-1", "replace")
