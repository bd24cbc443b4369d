"""The upstream client: one pooled httpx.AsyncClient per backend, streaming without buffering.

Failures become `BackendError`, which says whether a retry on another backend is safe: only
while nothing has been streamed to the client yet. Each failure is logged once, at warning, with
the backend, the kind of failure and the request id.

Kept-alive connections: a backend closes an idle connection on its own schedule (llama-server's
cpp-httplib after 5 s, `CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND`), and a request sent on it just as
it closes dies before any response byte. Two defences: the pool lets idle connections go sooner
than backends do (`keepalive_expiry`, 4 s by default), and a request whose connection closed
before any response byte is sent once more on a fresh connection, whatever the backend kind.
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
# simulator's `engine_priority`), and TGI and llama.cpp have no such field.
PRIORITY_SIGN = {"vllm": 1, "sglang": -1}
# What a backend answers when it was sent a priority it does not schedule by.
_PRIORITY_REFUSALS = ("Priority scheduling is not enabled", "Using priority is disabled")

# Raised before any response byte, these mean the connection closed under the request: the
# backend dropped a kept-alive socket (or died). Nothing reached the client, and an engine that
# saw the request lost it with the connection (a closed socket cancels its task), so one more
# try on a fresh connection is safe. A refused connection (ConnectError) is not one of them: a
# fresh connection would be refused too, and the pipeline tries another backend instead.
_CLOSED = (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError)


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
        keepalive_expiry: float = 4.0,
        name: str = "",
        transport: httpx.AsyncBaseTransport | None = None,
        priority_scheduling: bool = False,
    ) -> None:
        self.kind = kind
        self.name = name or base_url
        self.sends_priority = priority_scheduling
        headers = {"authorization": f"Bearer {api_key}"} if api_key else {}

        def client(keepalive: int) -> httpx.AsyncClient:
            return httpx.AsyncClient(
                base_url=base_url.rstrip("/"),
                headers=headers,
                # httpx's default of 100 connections would silently cap concurrency per backend.
                limits=httpx.Limits(
                    max_connections=max_connections,
                    max_keepalive_connections=keepalive,
                    keepalive_expiry=keepalive_expiry,
                ),
                # Long streams: a generous read timeout between chunks, a short connect timeout.
                timeout=httpx.Timeout(
                    connect=connect_timeout, read=read_timeout, write=30.0, pool=connect_timeout
                ),
                transport=transport,
            )

        self.http = client(min(max_connections, 256))
        # The retry's own client keeps no idle connection, so a retry never meets a stale one.
        self._fresh = client(0)

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
            self.name,
            error.message,
        )
        return True

    def _failed(self, request_id: str | None, kind: str, error: BackendError) -> BackendError:
        log.warning(
            "upstream %s failed (%s) for request %s: %s",
            self.name,
            kind,
            request_id or "-",
            error.message,
        )
        return error

    async def _open(
        self, path: str, body: dict[str, Any], request_id: str | None
    ) -> httpx.Response:
        """POST and return the response with its body unread; a connection closed before any
        response byte is tried once more on a fresh connection."""
        for client in (self.http, self._fresh):
            request = client.build_request("POST", path, json=body)
            try:
                return await client.send(request, stream=True)
            except _CLOSED as exc:
                if client is self.http:
                    self._failed(
                        request_id,
                        "connection closed, retrying on a fresh connection",
                        BackendError(f"unreachable: {exc!r}", retryable=True),
                    )
                    continue
                error = BackendError(f"unreachable: {exc!r}", retryable=True)
                raise self._failed(request_id, "connection closed", error) from None
            except (httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
                error = BackendError(f"timed out: {exc!r}", retryable=True)
                raise self._failed(request_id, "connect timeout", error) from None
            except httpx.TimeoutException as exc:
                error = BackendError(f"timed out: {exc!r}", retryable=False)
                raise self._failed(request_id, "timeout", error) from None
            except httpx.HTTPError as exc:
                error = BackendError(f"unreachable: {exc!r}", retryable=True)
                raise self._failed(request_id, "unreachable", error) from None
        raise AssertionError("the loop returns or raises")

    async def _status_error(self, response: httpx.Response, request_id: str | None) -> BackendError:
        error = _error_from_response(response.status_code, await response.aread())
        return self._failed(request_id, f"HTTP {response.status_code}", error)

    async def complete(
        self,
        path: str,
        body: dict[str, Any],
        priority: int | None = None,
        request_id: str | None = None,
    ) -> tuple[int, dict[str, Any]]:
        payload = self._body(body, priority)
        response = await self._open(path, payload, request_id)
        try:
            if response.status_code >= 400:
                error = await self._status_error(response, request_id)
                if self._refused_priority(error, payload):
                    return await self.complete(path, body, request_id=request_id)
                raise error
            try:
                raw = await response.aread()
            except httpx.TimeoutException as exc:
                error = BackendError(f"timed out: {exc!r}", retryable=False)
                raise self._failed(request_id, "timeout", error) from None
            except httpx.HTTPError as exc:
                error = BackendError(f"unreachable: {exc!r}", retryable=True)
                raise self._failed(request_id, "body broke", error) from None
        finally:
            await response.aclose()
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            error = BackendError("the backend answered without a JSON object", retryable=False)
            raise self._failed(request_id, "invalid JSON", error)
        return response.status_code, data

    async def stream_chat(
        self,
        path: str,
        body: dict[str, Any],
        priority: int | None = None,
        request_id: str | None = None,
    ) -> AsyncGenerator[bytes]:
        """Yield the raw SSE bytes as they arrive; closing the generator aborts the request."""
        payload = self._body(body, priority)
        response = await self._open(path, payload, request_id)
        if response.status_code >= 400:
            error = await self._status_error(response, request_id)
            await response.aclose()
            if not self._refused_priority(error, payload):
                raise error
            async for chunk in self.stream_chat(path, body, request_id=request_id):
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
                error = BackendError(f"the stream broke: {exc!r}", retryable=not sent)
                raise self._failed(request_id, "stream broke", error) from None
        finally:
            await response.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()
        await self._fresh.aclose()
