"""The upstream client: one pooled aiohttp session per backend, streaming without buffering.

The completion hop is the gateway's hottest path, so it goes through aiohttp: httpx/httpcore
spent about 4 ms of CPU per request here (its pool walks every pooled connection on each
request, and anyio's stream wrappers add more), aiohttp about 0.12 ms (docs/BENCHMARKS.md).
`http`, an httpx client, stays for the backend's control plane (metrics scrapes, llama-server's
`/props`), where a request every fraction of a second costs nothing that matters.

Failures become `BackendError`, which says whether a retry on another backend is safe: only
while nothing has been streamed to the client yet. Each failure is logged once, at warning, with
the backend, the kind of failure and the request id.

Kept-alive connections: a backend closes an idle connection on its own schedule (llama-server's
cpp-httplib after 5 s, `CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND`), and a request sent on it just as
it closes dies before any response byte. Two defences: the pool lets idle connections go sooner
than backends do (`keepalive_expiry`, 4 s by default, checked when a connection is taken), and a
request whose connection closed before any response byte is sent once more on a fresh
connection, whatever the backend kind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from collections.abc import AsyncGenerator, AsyncIterator, Awaitable, Callable, Iterator, Mapping
from typing import Any

import aiohttp
import httpx

from llmserver.backends.spec import BackendSpec
from llmserver.conf import DEFAULTS, GatewaySettings
from tenants.backend_kinds import profile

log = logging.getLogger(__name__)

# The paths whose whole answers are generated, and so may wait on a hung engine (`_unless_hung`);
# "/chat/completions" ends so too.
_GENERATING_PATHS = "/completions"

# How many connections `http` (the control plane: scrapes, probes) keeps; one poller uses one.
_CONTROL_CONNECTIONS = 4


class BackendError(Exception):
    def __init__(
        self,
        message: str,
        retryable: bool,
        status: int | None = None,
        body: dict[str, Any] | None = None,
        unreachable: bool = False,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.retryable = retryable
        self.status = status
        self.body = body
        # No connection at all (refused, or it died under us): the backend is down, not busy.
        self.unreachable = unreachable


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
        elif isinstance(body.get("detail"), str):
            # FastAPI's own answers (vLLM's, SGLang's): a route the server lacks is a bare
            # {"detail": "Not Found"}, e.g. /v1/embeddings on a generation model.
            message = f"The backend answered {status} {body['detail']}"
            if status == 404:
                message += ": it does not serve this endpoint"
    # 429 and 5xx mean "this backend, now": another backend may well take it.
    retryable = status == 429 or status >= 500
    return BackendError(message, retryable, status, body if isinstance(body, dict) else None)


def _closed_under_request(exc: aiohttp.ClientError) -> bool:
    """Raised before any response byte, does `exc` mean the connection closed under the request?
    The backend dropped a kept-alive socket (or died): nothing reached the client, and an engine
    that saw the request lost it with the connection (a closed socket cancels its task), so one
    more try on a fresh connection is safe. A refused connection (ClientConnectorError) is not
    one: a fresh connection would be refused too, and the pipeline tries another backend."""
    if isinstance(exc, aiohttp.ClientConnectorError):
        return False
    return isinstance(
        exc,
        aiohttp.ServerDisconnectedError
        | aiohttp.ClientOSError
        | aiohttp.ClientConnectionResetError,
    )


@contextlib.contextmanager
def _closing(response: aiohttp.ClientResponse) -> Iterator[None]:
    """A response read to its end gives its connection back to the pool; one left early (an
    error, a client gone, a closed generator) closes it, so the backend sees the abort."""
    try:
        yield
    except BaseException:
        response.close()
        raise
    response.release()


class UpstreamClient:
    def __init__(
        self,
        spec: BackendSpec,
        conf: GatewaySettings = DEFAULTS,
        full: Callable[[], bool] = lambda: False,
    ) -> None:
        """The client of `spec`'s backend, with the process's connection limits and timeouts
        (`conf`'s `upstream_*`). `full`: whether the engine's slots are all taken or work waits
        in its queue; a probe sent then waits behind that work, so its silence proves nothing."""
        self.kind = spec.kind
        self.profile = profile(spec.kind)
        self.name = spec.name
        # Sent only to a backend marked as running priority scheduling (see `backend_kinds`).
        self.sends_priority = spec.priority_scheduling
        self.base_url = spec.base_url.rstrip("/")
        self.max_connections = conf.upstream_max_connections
        self.keepalive_expiry = conf.upstream_keepalive_expiry
        # A stream's first event: a backend that accepts requests but produces nothing (a hung
        # engine behind a live HTTP server) is found in this long, not the read timeout; a
        # whole answer's engine is asked for one (`_unless_hung`) as often.
        self.first_byte_timeout = spec.first_byte_timeout
        self.full = full
        self._headers = {"content-type": "application/json"}
        if spec.api_key:
            self._headers["authorization"] = f"Bearer {spec.api_key}"
        # Long streams: a generous read timeout between chunks; `connect` covers the wait for a
        # pooled connection as well as the TCP handshake.
        self._timeout = aiohttp.ClientTimeout(
            total=None,
            connect=conf.upstream_connect_timeout,
            sock_connect=conf.upstream_connect_timeout,
            sock_read=conf.upstream_read_timeout,
        )
        self.http = httpx.AsyncClient(
            base_url=self.base_url,
            headers={k: v for k, v in self._headers.items() if k == "authorization"},
            limits=httpx.Limits(
                max_connections=_CONTROL_CONNECTIONS, keepalive_expiry=self.keepalive_expiry
            ),
            timeout=httpx.Timeout(
                conf.upstream_read_timeout, connect=conf.upstream_connect_timeout
            ),
        )
        # Made on first use: an aiohttp session belongs to the running event loop.
        self._pooled: aiohttp.ClientSession | None = None
        self._fresh: aiohttp.ClientSession | None = None
        # Requests under way, so a client replaced by a configuration change closes only once
        # its last one has ended (`retire`): an admin edit never cuts a stream.
        self._active = 0
        self._retired = False
        self._closing: asyncio.Task[None] | None = None
        # Whether a hung engine keeps a whole (non-streamed) answer waiting (`_answers`).
        self._probe: asyncio.Task[bool] | None = None
        self._answered_at: float | None = None

    def sessions(self) -> tuple[aiohttp.ClientSession, aiohttp.ClientSession]:
        """The pooled session, and the retry's own that keeps no idle connection (so a retry
        never meets a stale one); made in the running loop on first use."""
        if self._pooled is None or self._fresh is None:
            pool = aiohttp.TCPConnector(
                limit=self.max_connections, keepalive_timeout=self.keepalive_expiry
            )
            fresh = aiohttp.TCPConnector(limit=self.max_connections, force_close=True)
            self._pooled = aiohttp.ClientSession(connector=pool, timeout=self._timeout)
            self._fresh = aiohttp.ClientSession(connector=fresh, timeout=self._timeout)
        return self._pooled, self._fresh

    def _body(self, body: dict[str, Any], priority: int | None) -> dict[str, Any]:
        sign = self.profile.priority_sign
        if priority is not None and sign is not None and self.sends_priority:
            return {**body, "priority": sign * priority}
        return body

    def _refused_priority(self, error: BackendError, sent: dict[str, Any]) -> bool:
        """The backend refused the priority it was sent: never send it again (it was marked as
        running priority scheduling but does not), and say so once."""
        refusals = self.profile.priority_refusals
        if "priority" not in sent or not any(r in error.message for r in refusals):
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
        self,
        path: str,
        body: dict[str, Any],
        request_id: str | None,
        headers: Mapping[str, str] | None = None,
    ) -> aiohttp.ClientResponse:
        """POST and return the response with its body unread; a connection closed before any
        response byte is tried once more on a fresh connection. `headers` are sent besides the
        client's own (the request's trace context, `traceparent`)."""
        url, data = self.base_url + path, json.dumps(body).encode()
        sent = {**self._headers, **headers} if headers else self._headers
        pooled, fresh = self.sessions()
        for session in (pooled, fresh):
            try:
                return await session.post(url, data=data, headers=sent)
            except aiohttp.ClientError as exc:
                if isinstance(exc, aiohttp.ConnectionTimeoutError):
                    error = BackendError(f"timed out: {exc!r}", retryable=True)
                    raise self._failed(request_id, "connect timeout", error) from None
                if isinstance(exc, aiohttp.ServerTimeoutError):
                    error = BackendError(f"timed out: {exc!r}", retryable=False)
                    raise self._failed(request_id, "timeout", error) from None
                error = BackendError(f"unreachable: {exc!r}", retryable=True, unreachable=True)
                if not _closed_under_request(exc):
                    raise self._failed(request_id, "unreachable", error) from None
                if session is fresh:
                    raise self._failed(request_id, "connection closed", error) from None
                self._failed(request_id, "connection closed, retrying on a fresh connection", error)
        raise AssertionError("the loop returns or raises")

    async def _status_error(
        self, response: aiohttp.ClientResponse, request_id: str | None
    ) -> BackendError:
        try:
            raw = await response.read()
        except aiohttp.ClientError:
            raw = b""
        error = _error_from_response(response.status, raw)
        return self._failed(request_id, f"HTTP {response.status}", error)

    @contextlib.contextmanager
    def _in_use(self) -> Iterator[None]:
        self._active += 1
        try:
            yield
        finally:
            self._active -= 1
            if self._retired and self._active == 0:
                self._close_soon()

    def retire(self) -> None:
        """No new request will use this client: close it once the ones under way have ended."""
        self._retired = True
        if self._active == 0:
            self._close_soon()

    def _close_soon(self) -> None:
        if self._closing is None:
            self._closing = asyncio.get_running_loop().create_task(self.aclose())

    async def complete(
        self,
        path: str,
        body: dict[str, Any],
        priority: int | None = None,
        request_id: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> tuple[int, dict[str, Any]]:
        with self._in_use():
            call = self._complete(path, body, priority, request_id, headers)
            if not path.endswith(_GENERATING_PATHS):
                return await call
            return await self._unless_hung(call, path, body, request_id)

    async def _unless_hung(
        self,
        call: Awaitable[tuple[int, dict[str, Any]]],
        path: str,
        body: dict[str, Any],
        request_id: str | None,
    ) -> tuple[int, dict[str, Any]]:
        """A whole answer's first byte is its last, so past `first_byte_timeout` a long
        generation and a hung engine look alike: each `first_byte_timeout` without the answer,
        the engine is asked for a one-token stream (`_answers`). One that sends nothing to that
        either, with a free slot, is hung: the request is given up, as a stream's would be, and
        its connection closed (the engine aborts it if it ever wakes). On a full engine the
        probe waits behind the work it would judge, so only the read timeout bounds the wait."""
        task = asyncio.ensure_future(call)
        try:
            while True:
                done, _ = await asyncio.wait({task}, timeout=self.first_byte_timeout)
                if done:
                    return task.result()
                if not await self._answers(path, body, request_id) and not self.full():
                    raise self._hung(request_id)
        finally:
            if not task.done():
                task.cancel()
                await asyncio.wait({task})

    async def _answers(self, path: str, body: dict[str, Any], request_id: str | None) -> bool:
        """Whether the engine sent a byte of a one-token stream within `first_byte_timeout`,
        asked at most once at a time, and not again within `first_byte_timeout` of an answer
        (every request waiting on this backend shares it)."""
        loop = asyncio.get_running_loop()
        if (
            self._answered_at is not None
            and loop.time() - self._answered_at < self.first_byte_timeout
        ):
            return True
        if self._probe is None or self._probe.done():
            self._probe = asyncio.ensure_future(self._probe_once(path, body, request_id))
        return await asyncio.shield(self._probe)

    async def _probe_once(self, path: str, body: dict[str, Any], request_id: str | None) -> bool:
        probe: dict[str, Any] = {"model": body.get("model"), "max_tokens": 1, "stream": True}
        if "messages" in body:
            probe["messages"] = [{"role": "user", "content": "."}]
        else:
            probe["prompt"] = "."
        try:
            async with asyncio.timeout(self.first_byte_timeout):
                response = await self._open(path, probe, request_id)
                try:
                    await response.content.readany()
                finally:
                    response.close()  # its first byte is the answer; the engine aborts the rest
        except (TimeoutError, BackendError, aiohttp.ClientError):
            return False
        self._answered_at = asyncio.get_running_loop().time()
        return True

    async def _complete(
        self,
        path: str,
        body: dict[str, Any],
        priority: int | None,
        request_id: str | None,
        headers: Mapping[str, str] | None,
    ) -> tuple[int, dict[str, Any]]:
        payload = self._body(body, priority)
        response = await self._open(path, payload, request_id, headers)
        with _closing(response):
            if response.status >= 400:
                error = await self._status_error(response, request_id)
                if self._refused_priority(error, payload):
                    return await self._complete(path, body, None, request_id, headers)
                raise error
            try:
                raw = await response.read()
            except aiohttp.ServerTimeoutError as exc:
                error = BackendError(f"timed out: {exc!r}", retryable=False)
                raise self._failed(request_id, "timeout", error) from None
            except aiohttp.ClientError as exc:
                error = BackendError(f"unreachable: {exc!r}", retryable=True)
                raise self._failed(request_id, "body broke", error) from None
        try:
            data = json.loads(raw)
        except ValueError:
            data = None
        if not isinstance(data, dict):
            error = BackendError("the backend answered without a JSON object", retryable=False)
            raise self._failed(request_id, "invalid JSON", error)
        return response.status, data

    async def stream_chat(
        self,
        path: str,
        body: dict[str, Any],
        priority: int | None = None,
        request_id: str | None = None,
        headers: Mapping[str, str] | None = None,
    ) -> AsyncGenerator[bytes]:
        """Yield the raw SSE bytes as they arrive; closing the generator aborts the request (an
        unfinished response's connection is closed, not pooled)."""
        with self._in_use():
            async for chunk in self._stream_chat(path, body, priority, request_id, headers):
                yield chunk

    async def _stream_chat(
        self,
        path: str,
        body: dict[str, Any],
        priority: int | None,
        request_id: str | None,
        headers: Mapping[str, str] | None,
    ) -> AsyncGenerator[bytes]:
        payload = self._body(body, priority)
        deadline = asyncio.get_running_loop().time() + self.first_byte_timeout
        try:
            async with asyncio.timeout_at(deadline):
                response = await self._open(path, payload, request_id, headers)
        except TimeoutError:
            raise self._hung(request_id) from None
        if response.status >= 400:
            with _closing(response):
                error = await self._status_error(response, request_id)
            if not self._refused_priority(error, payload):
                raise error
            async for chunk in self._stream_chat(path, body, None, request_id, headers):
                yield chunk
            return
        with _closing(response):
            chunks = response.content.iter_any()
            sent = False
            try:
                first = await self._first_chunk(chunks, deadline, request_id)
                if first:
                    sent = True
                    yield first
                async for chunk in chunks:
                    yield chunk
            except aiohttp.ClientError as exc:
                error = BackendError(f"the stream broke: {exc!r}", retryable=not sent)
                raise self._failed(request_id, "stream broke", error) from None

    async def _first_chunk(
        self, chunks: AsyncIterator[bytes], deadline: float, request_id: str | None
    ) -> bytes:
        """The stream's first event by `deadline`, or the backend is hung; unless its engine is
        full, where the request may be waiting in the engine's own queue (vLLM sends a stream's
        first event with its first output): then each further `first_byte_timeout`, as long
        as it stays full."""
        while True:
            try:
                async with asyncio.timeout_at(deadline):
                    return await anext(chunks, b"")
            except TimeoutError:
                if not self.full():
                    raise self._hung(request_id) from None
            deadline = asyncio.get_running_loop().time() + self.first_byte_timeout

    def _hung(self, request_id: str | None) -> BackendError:
        """Nothing within `first_byte_timeout`: nothing reached the client either, so another
        backend may take the request."""
        error = BackendError(
            f"the backend sent nothing within {self.first_byte_timeout:g} s", retryable=True
        )
        return self._failed(request_id, "no first byte", error)

    async def aclose(self) -> None:
        if self._probe is not None and not self._probe.done():
            self._probe.cancel()
        await self.http.aclose()
        for session in (self._pooled, self._fresh):
            if session is not None:
                await session.close()
