"""The upstream client: one pooled httpx.AsyncClient per backend, streaming without buffering.

Failures become `BackendError`, which says whether a retry on another backend is safe: only
while nothing has been streamed to the client yet.
"""

from __future__ import annotations

import json
import logging
from collections.abc import AsyncGenerator
from typing import Any

import httpx

log = logging.getLogger(__name__)

# How each kind reads a request-level integer `priority`: vLLM serves lower values first, SGLang
# higher values first (its default; `--schedule-low-priority-values-first` flips it). Sent only
# to a backend marked as running priority scheduling: a stock vLLM refuses it (see the
# simulator's `engine_priority`), and TGI has no such field.
PRIORITY_SIGN = {"vllm": 1, "sglang": -1}
# What a backend answers when it was sent a priority it does not schedule by.
_PRIORITY_REFUSALS = ("Priority scheduling is not enabled", "Using priority is disabled")
_PASS_HEADERS = ("content-type",)


class BackendError(Exception):
    def __init__(
        self,
        message: str,
        retryable: bool,
        status: int | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.status = status
        self.body = body


def _error_from_response(status: int, raw: bytes) -> BackendError:
    try:
        body = json.loads(raw)
    except ValueError:
        body = None
    message = f"upstream answered {status}"
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and isinstance(err.get("message"), str):
            message = err["message"]
        elif isinstance(err, str):
            message = err  # TGI: {"error": "...", "error_type": "..."}
        elif isinstance(body.get("message"), str):
            message = body["message"]
    # 429 and 5xx mean "this backend, now": another backend may well take it.
    retryable = status == 429 or status >= 500
    return BackendError(message, retryable, status, body if isinstance(body, dict) else None)


class UpstreamClient:
    def __init__(
        self,
        base_url: str,
        kind: str,
        api_key: str = "",
        max_connections: int = 1024,
        connect_timeout: float = 5.0,
        read_timeout: float = 600.0,
        transport: httpx.AsyncBaseTransport | None = None,
        priority_scheduling: bool = False,
    ) -> None:
        self.kind = kind
        self.sends_priority = priority_scheduling
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}
        self.http = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=headers,
            # httpx's default of 100 connections would silently cap concurrency per backend.
            limits=httpx.Limits(
                max_connections=max_connections,
                max_keepalive_connections=min(max_connections, 256),
                keepalive_expiry=30.0,
            ),
            # Long streams: a generous read timeout between chunks, a short connect timeout.
            timeout=httpx.Timeout(
                connect=connect_timeout, read=read_timeout, write=30.0, pool=connect_timeout
            ),
            transport=transport,
        )

    def _body(self, body: dict[str, Any], priority: int | None) -> dict[str, Any]:
        sign = PRIORITY_SIGN.get(self.kind)
        if priority is not None and sign is not None and self.sends_priority:
            return {**body, "priority": sign * priority}
        return body

    def _refused_priority(self, error: BackendError, sent: dict[str, Any]) -> bool:
        """The backend refused the priority it was sent: never send it again (it was marked as
        running priority scheduling but does not), and say so once."""
        if "priority" not in sent or not any(r in error.message for r in _PRIORITY_REFUSALS):
            return False
        self.sends_priority = False
        log.warning(
            "backend %s refused the request's priority (%s); sending none from now on",
            self.http.base_url,
            error.message,
        )
        return True

    async def complete(
        self, path: str, body: dict[str, Any], priority: int | None = None
    ) -> tuple[int, dict[str, Any]]:
        payload = self._body(body, priority)
        try:
            response = await self.http.post(path, json=payload)
        except httpx.TimeoutException as exc:
            raise BackendError(f"timed out: {exc!r}", retryable=False) from None
        except httpx.HTTPError as exc:
            raise BackendError(f"unreachable: {exc!r}", retryable=True) from None
        if response.status_code >= 400:
            error = _error_from_response(response.status_code, response.content)
            if self._refused_priority(error, payload):
                return await self.complete(path, body)
            raise error
        try:
            data = response.json()
        except ValueError:
            data = None
        if not isinstance(data, dict):
            raise BackendError("the backend answered without a JSON object", retryable=False)
        return response.status_code, data

    async def stream_chat(
        self, path: str, body: dict[str, Any], priority: int | None = None
    ) -> AsyncGenerator[bytes]:
        """Yield the raw SSE bytes as they arrive; closing the generator aborts the request."""
        payload = self._body(body, priority)
        request = self.http.build_request("POST", path, json=payload)
        try:
            response = await self.http.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise BackendError(f"unreachable: {exc!r}", retryable=True) from None
        if response.status_code >= 400:
            error = _error_from_response(response.status_code, await response.aread())
            await response.aclose()
            if not self._refused_priority(error, payload):
                raise error
            async for chunk in self.stream_chat(path, body):
                yield chunk
            return
        try:
            sent = False
            try:
                async for chunk in response.aiter_raw():
                    if chunk:
                        sent = True
                        yield chunk
            except httpx.HTTPError as exc:
                raise BackendError(f"the stream broke: {exc!r}", retryable=not sent) from None
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()
