"""A consumer whose request body is kept in a spooled temporary file, never whole in memory.

`/v1/files` takes uploads of up to `FILES_MAX_BYTES` (200 MB by default), far past what the JSON
endpoints hold in memory: the body goes to memory up to 1 MiB, then to a temporary file beside
the stored files, and a body past `body_limit()` is refused with 413 as soon as it is known
(its Content-Length, or the bytes received), without reading the rest. Small writes to a local
file are made on the event loop: a page-cache write of one received chunk is cheaper than a
thread hop per chunk.
"""

from __future__ import annotations

import logging
import tempfile
from collections.abc import Mapping
from typing import IO, Any, NoReturn
from urllib.parse import parse_qsl

from asgiref.typing import HTTPRequestEvent
from channels.exceptions import StopConsumer

from llmserver.api.http import JsonHttpConsumer
from llmserver.conf import GatewaySettings
from llmserver.runtime.keys import KeyInfo
from llmserver.wire.errors import ApiError, internal_error, too_large

log = logging.getLogger(__name__)

SPOOL_IN_MEMORY = 1024 * 1024


class SpooledBodyConsumer(JsonHttpConsumer):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.spool: IO[bytes] | None = None
        self.size = 0
        self.refused = False
        self.limit = 0

    def body_limit(self, conf: GatewaySettings) -> int:
        """The largest body this endpoint takes."""
        return conf.max_body_bytes

    def spool_dir(self, conf: GatewaySettings) -> str | None:
        """Where a body past 1 MiB goes (None: the system's temporary directory)."""
        return None

    def too_large(self, limit: int) -> ApiError:
        return too_large(limit)

    async def http_request(self, message: HTTPRequestEvent) -> None:
        if self.refused:
            return
        if self.spool is None:
            # The method and the key first: nothing is stored for a request that is refused.
            try:
                port, key = await self.authorized()
            except ApiError as exc:
                await self._refuse(exc)
            conf = port.settings
            limit = self.body_limit(conf)
            declared = header(self.scope, b"content-length")
            if declared and declared.isascii() and declared.isdigit() and int(declared) > limit:
                await self._refuse(self.too_large(limit))
            self.conf, self.key, self.limit = conf, key, limit
            self.spool = tempfile.SpooledTemporaryFile(  # noqa: SIM115  (closed below)
                max_size=SPOOL_IN_MEMORY, dir=self.spool_dir(conf)
            )
        chunk = message.get("body", b"")
        self.size += len(chunk)
        if self.size > self.limit:
            await self._refuse(self.too_large(self.limit))
        self.spool.write(chunk)
        if message.get("more_body"):
            return
        try:
            await self.respond(self.conf, self.key, self.spool, self.size)
        except ApiError as exc:
            await self.send_error(exc)
        except Exception:
            log.exception("%s %s failed", self.scope["method"], self.scope["path"])
            await self.send_error(internal_error())
        finally:
            self.spool.close()
        raise StopConsumer()

    async def _refuse(self, exc: ApiError) -> NoReturn:
        self.refused = True
        if self.spool is not None:
            self.spool.close()
        await self.send_error(exc)
        raise StopConsumer()

    async def respond(
        self, conf: GatewaySettings, key: KeyInfo, body: IO[bytes], size: int
    ) -> None:
        """Answer the request of `key`; `body` holds its `size` bytes. An ApiError raised is
        sent as the answer."""
        raise NotImplementedError

    def query(self) -> dict[str, str]:
        """The query string's parameters (the last of a repeated one)."""
        raw = bytes(self.scope.get("query_string", b"")).decode("latin-1")
        return dict(parse_qsl(raw, keep_blank_values=True))


def header(scope: Mapping[str, Any], name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value).decode("latin-1")
    return None
