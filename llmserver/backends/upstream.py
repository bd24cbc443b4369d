"""The gateway's HTTP client for one backend: pooled, streaming, with errors that say whether a
retry on another backend is safe.

One `httpx.AsyncClient` per backend with explicit limits (httpx's default of 100 connections
would silently cap concurrency) and a read timeout sized for long generations. `stream_chat`
yields the upstream bytes as they arrive; closing the iterator closes the response, which drops
the connection, and vLLM aborts the request on disconnect.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import httpx

PRIORITY_KINDS = frozenset({"vllm", "sglang"})


class BackendError(Exception):
    """`retryable` is True only when nothing reached the client yet, so another backend may try."""

    def __init__(
        self,
        message: str,
        retryable: bool,
        status: int | None = None,
        body: dict[str, Any] | None = None,
    ) -> None:
        super().__init__(message)
        self.message, self.retryable, self.status, self.body = message, retryable, status, body


def _error_body(raw: bytes) -> dict[str, Any] | None:
    try:
        body = json.loads(raw)
    except ValueError:
        return None
    return body if isinstance(body, dict) else None


def _message(status: int, body: dict[str, Any] | None) -> str:
    err = (body or {}).get("error")
    if isinstance(err, dict) and err.get("message"):
        return str(err["message"])
    if isinstance(err, str):  # TGI: {"error": "...", "error_type": "..."}
        return err
    return f"upstream answered {status}"


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
    ) -> None:
        self.kind = kind
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            headers=headers,
            limits=httpx.Limits(
                max_connections=max_connections,
                max_keepalive_connections=max_connections,
                keepalive_expiry=30.0,
            ),
            # pool: waiting for a free connection is bounded by connect_timeout too.
            timeout=httpx.Timeout(
                connect=connect_timeout,
                read=read_timeout,
                write=connect_timeout,
                pool=connect_timeout,
            ),
            transport=transport,
        )

    def body_for(self, body: dict[str, Any], priority: int | None) -> dict[str, Any]:
        """vLLM (and SGLang) take an integer `priority`, lower first; others never see it."""
        out = {k: v for k, v in body.items() if k != "priority"}
        if priority is not None and self.kind in PRIORITY_KINDS:
            out["priority"] = int(priority)
        return out

    async def stream_chat(
        self, path: str, body: dict[str, Any], priority: int | None = None
    ) -> AsyncIterator[bytes]:
        """Yield raw SSE bytes as they arrive. A failure before the first chunk is retryable,
        one after it is not. `aclose()` on the iterator aborts the upstream request."""
        request = self.client.build_request("POST", path, json=self.body_for(body, priority))
        try:
            response = await self.client.send(request, stream=True)
        except httpx.HTTPError as exc:
            raise BackendError(f"cannot reach backend: {exc!r}", retryable=True) from exc
        streamed = False
        try:
            if response.status_code >= 400:
                raw = await response.aread()
                parsed = _error_body(raw)
                raise BackendError(
                    _message(response.status_code, parsed),
                    retryable=response.status_code >= 500,
                    status=response.status_code,
                    body=parsed,
                )
            async for chunk in response.aiter_raw():
                streamed = True
                yield chunk
        except httpx.HTTPError as exc:
            raise BackendError(
                f"backend stream failed: {exc!r}",
                retryable=not streamed,
                status=response.status_code,
            ) from exc
        finally:
            await response.aclose()

    async def complete(
        self, path: str, body: dict[str, Any], priority: int | None = None
    ) -> tuple[int, dict[str, Any]]:
        """A non-streaming call. Errors with a body are returned; only transport failures and
        5xx raise (retryable: nothing has reached the client)."""
        try:
            response = await self.client.post(path, json=self.body_for(body, priority))
        except httpx.HTTPError as exc:
            raise BackendError(f"cannot reach backend: {exc!r}", retryable=True) from exc
        parsed = _error_body(response.content)
        if response.status_code >= 500:
            raise BackendError(
                _message(response.status_code, parsed),
                retryable=True,
                status=response.status_code,
                body=parsed,
            )
        if parsed is None:
            raise BackendError(
                "backend answered with a non-JSON body", retryable=True, status=response.status_code
            )
        return response.status_code, parsed

    async def aclose(self) -> None:
        await self.client.aclose()
