"""`/v1/batches`, as OpenAI has it: create, retrieve, list and cancel.

A batch is created `validating` and answered at once; the gateway's batch runner
(`llmserver/batches/runner.py`) validates its lines and runs them on the batch band, and its
progress shows here (`request_counts`). Like files, a batch is its user's: their keys and their
tenant administrator's see it and may cancel it; any other key's is a 404.
"""

from __future__ import annotations

from typing import IO

from llmserver.api.bodies import SpooledBodyConsumer, header
from llmserver.api.files import page_from
from llmserver.batches import records
from llmserver.batches.objects import batch_object, list_object
from llmserver.batches.validation import check_create
from llmserver.conf import GatewaySettings
from llmserver.runtime.db import run_db
from llmserver.runtime.keys import KeyInfo
from llmserver.wire.validation import parse_json

DEFAULT_LIST, MAX_LIST = 20, 100


class BatchesConsumer(SpooledBodyConsumer):
    """POST /v1/batches (create) and GET /v1/batches (those the key sees, newest first)."""

    methods = ("GET", "HEAD", "POST")

    async def respond(
        self, conf: GatewaySettings, key: KeyInfo, body: IO[bytes], size: int
    ) -> None:
        if self.scope["method"] == "POST":
            body.seek(0)
            data = parse_json(body.read(), header(self.scope, b"content-type"))
            batch = await run_db(records.create_batch, key, check_create(data))
            await self.send_json(200, batch_object(batch))
            return
        query = self.query()
        query.pop("order", None)  # OpenAI lists batches newest first only
        page = page_from(query, DEFAULT_LIST, MAX_LIST)
        found, more = await run_db(records.list_batches, key, page)
        await self.send_json(200, list_object([batch_object(b) for b in found], more))


class BatchConsumer(SpooledBodyConsumer):
    """GET /v1/batches/{batch_id}."""

    async def respond(
        self, conf: GatewaySettings, key: KeyInfo, body: IO[bytes], size: int
    ) -> None:
        batch = await run_db(records.get_batch, key, self.route_arg("batch_id"))
        await self.send_json(200, batch_object(batch))


class BatchCancelConsumer(SpooledBodyConsumer):
    """POST /v1/batches/{batch_id}/cancel: `cancelling` until its lines in flight have ended."""

    methods = ("POST",)

    async def respond(
        self, conf: GatewaySettings, key: KeyInfo, body: IO[bytes], size: int
    ) -> None:
        batch = await run_db(records.cancel_batch, key, self.route_arg("batch_id"))
        await self.send_json(200, batch_object(batch))
