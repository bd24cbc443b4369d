"""CORS for browser JavaScript calling the OpenAI surface (`/v1/*`), off unless configured.

`CORS_ALLOWED_ORIGINS` lists the pages that may call the API (`https://chat.example.com`), or is
`*` for any page. When it is empty the middleware is not installed at all (`with_cors` returns the
application unchanged). When it is set, each `/v1` route is wrapped in `CorsMiddleware`:

1. A request whose `Origin` is not allowed (or that has none: curl, servers) passes through
   untouched and gets no CORS headers. Its preflight reaches the consumer like any `OPTIONS`, which
   answers 405 (or 404 on an unknown path) without CORS headers, so the browser refuses the call:
   a foreign page sees the gateway exactly as it would with CORS off.
2. An allowed preflight (`OPTIONS` with `Access-Control-Request-Method`) is answered 204 here,
   before authentication or the scheduler: browsers never send the API key on a preflight.
3. An allowed request gets `Access-Control-Allow-Origin` and `Access-Control-Expose-Headers` on its
   response start, whatever the consumer sends: JSON, an SSE stream, or an error.

The API authenticates by bearer key, never by cookie, so no `Access-Control-Allow-Credentials` is
sent; that is what makes answering `*` safe when `*` is configured. With a list, the origin is
echoed and `Vary: Origin` tells caches the answer depends on it.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from typing import Any
from urllib.parse import urlsplit

from django.core.exceptions import ImproperlyConfigured

Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Mapping[str, Any], Receive, Send], Awaitable[None]]

ANY = "*"
ALLOW_METHODS = b"GET, POST, OPTIONS"
# Browsers cap it (Chromium at 2 h, Firefox at 24 h); ten minutes bounds how long a page keeps
# calling after its origin is removed from the list.
MAX_AGE = b"600"
# What the gateway sends that a page may read: ids, queue time, and OpenAI's rate-limit headers
# (`llmserver.pipeline.admission`), which the openai JS SDK reads for its retries.
EXPOSE_HEADERS = b", ".join(
    [
        b"x-request-id",
        b"x-queue-time-ms",
        b"retry-after",
        *(
            f"x-ratelimit-{figure}-{unit}".encode()
            for unit in ("requests", "tokens")
            for figure in ("limit", "remaining", "reset")
        ),
    ]
)
_DEFAULT_PORTS = {"http": 80, "https": 443}


def allowed_origins(values: Iterable[str], name: str = "CORS_ALLOWED_ORIGINS") -> tuple[str, ...]:
    """Each origin checked and spelled as browsers send it (lower case, no default port):
    `scheme://host[:port]`, or `*` alone. Raises ImproperlyConfigured naming the setting."""
    origins = tuple(value.strip() for value in values if value.strip())
    if ANY in origins:
        if len(origins) > 1:
            raise ImproperlyConfigured(f"{name}: '*' allows every origin; list nothing beside it")
        return origins
    return tuple(_origin(value, name) for value in origins)


def _origin(value: str, name: str) -> str:
    hint = f"{name} must list origins such as https://chat.example.com, or be '*'; got {value!r}"
    parts = urlsplit(value)
    try:
        port = parts.port
    except ValueError:
        raise ImproperlyConfigured(hint) from None
    malformed = (
        not parts.scheme
        or not parts.hostname
        or parts.username is not None
        or parts.path
        or parts.query
        or parts.fragment
        or value.endswith(("?", "#"))
    )
    if malformed:
        raise ImproperlyConfigured(hint)
    scheme, netloc = parts.scheme.lower(), parts.netloc.lower()
    if port is not None and _DEFAULT_PORTS.get(scheme) == port:
        netloc = netloc.rsplit(":", 1)[0]
    return f"{scheme}://{netloc}"


def with_cors(origins: tuple[str, ...]) -> Callable[[App], App]:
    """What wraps each `/v1` route: the middleware, or, with no origins, nothing at all."""
    if not origins:
        return lambda app: app
    checked = allowed_origins(origins)
    return lambda app: CorsMiddleware(app, checked)


def _header(scope: Mapping[str, Any], name: bytes) -> bytes | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return bytes(value)
    return None


class CorsMiddleware:
    """Answers allowed preflights and labels allowed responses; see the module docstring."""

    def __init__(self, app: App, origins: tuple[str, ...]) -> None:
        self.app = app
        self.any = origins == (ANY,)
        self.origins = frozenset(origins)

    def allow_origin(self, origin: bytes) -> list[tuple[bytes, bytes]] | None:
        """The headers naming who may read the response, or None if this origin may not."""
        if self.any:
            return [(b"access-control-allow-origin", b"*")]
        if origin.decode("latin-1").lower() in self.origins:
            return [(b"access-control-allow-origin", origin), (b"vary", b"Origin")]
        return None

    async def __call__(self, scope: Mapping[str, Any], receive: Receive, send: Send) -> None:
        origin = _header(scope, b"origin") if scope["type"] == "http" else None
        allow = self.allow_origin(origin) if origin is not None else None
        if allow is None:
            await self.app(scope, receive, send)
            return
        requested = _header(scope, b"access-control-request-method")
        if scope["method"] == "OPTIONS" and requested is not None:
            await self._preflight(scope, allow, send)
            return

        async def labelled(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += allow
                headers.append((b"access-control-expose-headers", EXPOSE_HEADERS))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, labelled)

    async def _preflight(
        self, scope: Mapping[str, Any], allow: list[tuple[bytes, bytes]], send: Send
    ) -> None:
        # A preflight has no body to read; the key and the scheduler never see it.
        headers = [
            *allow,
            (b"access-control-allow-methods", ALLOW_METHODS),
            (b"access-control-max-age", MAX_AGE),
        ]
        # The openai JS SDK asks for authorization, content-type and its x-stainless-* headers;
        # echoing the list lets it add more without a change here.
        asked = _header(scope, b"access-control-request-headers")
        if asked:
            headers.append((b"access-control-allow-headers", asked))
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
