"""CORS on /v1 for browser pages (CORS_ALLOWED_ORIGINS): preflights answered before auth, headers
on every allowed response (streams and errors too), nothing for other origins, off by default."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured

from llmserver.api.cors import allowed_origins, with_cors
from llmserver.conf import GatewaySettings
from tests.api.conftest import chat_body
from tests.api.http_helpers import exchange

ORIGIN = b"https://chat.example.com"
# What the openai JS SDK asks for on its preflight.
SDK_HEADERS = b"authorization,content-type,x-stainless-arch,x-stainless-lang,x-stainless-os"


def application(*origins: str) -> Any:
    from llmserver.asgi import build_application

    return build_application(GatewaySettings(cors_allowed_origins=origins))


async def call(
    app: Any, method: str, path: str, headers: list[tuple[bytes, bytes]], body: bytes = b""
) -> tuple[int, dict[bytes, bytes], bytes]:
    sent = [*headers, (b"content-length", str(len(body)).encode())]
    return await exchange(method, path, body, sent, app=app)


def preflight(origin: bytes = ORIGIN) -> list[tuple[bytes, bytes]]:
    return [
        (b"origin", origin),
        (b"access-control-request-method", b"POST"),
        (b"access-control-request-headers", SDK_HEADERS),
    ]


def cors_headers(headers: dict[bytes, bytes]) -> dict[bytes, bytes]:
    return {k: v for k, v in headers.items() if k.startswith(b"access-control-")}


async def test_an_allowed_preflight_is_answered_before_auth_and_the_scheduler() -> None:
    # No database here: had the preflight reached the consumer, starting the gateway would fail.
    status, headers, body = await call(
        application(ORIGIN.decode()), "OPTIONS", "/v1/chat/completions", preflight()
    )
    assert (status, body) == (204, b"")
    assert cors_headers(headers) == {
        b"access-control-allow-origin": ORIGIN,
        b"access-control-allow-methods": b"GET, POST, OPTIONS",
        b"access-control-allow-headers": SDK_HEADERS,
        b"access-control-max-age": b"600",
    }
    assert headers[b"vary"] == b"Origin"


async def test_a_wildcard_answers_any_origin_with_a_star() -> None:
    status, headers, _ = await call(
        application("*"), "OPTIONS", "/v1/models", preflight(b"http://localhost:5173")
    )
    assert status == 204
    assert headers[b"access-control-allow-origin"] == b"*"
    assert b"access-control-allow-credentials" not in headers


async def test_a_preflight_from_another_origin_gets_the_usual_405_without_cors_headers(
    gateway: Any,
) -> None:
    status, headers, _ = await call(
        application(ORIGIN.decode()),
        "OPTIONS",
        "/v1/chat/completions",
        preflight(b"https://evil.example.net"),
    )
    assert status == 405
    assert cors_headers(headers) == {}


async def test_a_streamed_completion_carries_the_cors_headers(
    gateway: Any, world: dict[str, Any]
) -> None:
    headers = [
        (b"origin", ORIGIN),
        (b"authorization", f"Bearer {world['alice']}".encode()),
        (b"content-type", b"application/json"),
    ]
    status, got, body = await call(
        application(ORIGIN.decode()), "POST", "/v1/chat/completions", headers, chat_body()
    )
    assert status == 200
    assert got[b"content-type"].startswith(b"text/event-stream")
    assert body.rstrip().endswith(b"data: [DONE]")
    assert got[b"access-control-allow-origin"] == ORIGIN
    exposed = got[b"access-control-expose-headers"].split(b", ")
    assert {b"x-request-id", b"x-queue-time-ms", b"retry-after"} <= set(exposed)
    assert b"x-ratelimit-remaining-tokens" in exposed
    assert got[b"vary"] == b"Origin"


async def test_an_error_response_carries_the_cors_headers(gateway: Any) -> None:
    headers = [
        (b"origin", ORIGIN),
        (b"authorization", b"Bearer sk-not-a-key"),
        (b"content-type", b"application/json"),
    ]
    status, got, _ = await call(
        application(ORIGIN.decode()), "POST", "/v1/chat/completions", headers, chat_body()
    )
    assert status == 401
    assert got[b"access-control-allow-origin"] == ORIGIN
    assert b"x-request-id" in got[b"access-control-expose-headers"]


async def test_metrics_gets_no_cors_headers(gateway: Any) -> None:
    status, headers, _ = await call(
        application(ORIGIN.decode()), "GET", "/metrics", [(b"origin", ORIGIN)]
    )
    assert status == 200
    assert cors_headers(headers) == {}


async def test_cors_is_off_by_default_and_options_is_not_special() -> None:
    status, headers, _ = await call(
        application(*GatewaySettings().cors_allowed_origins), "OPTIONS", "/v1/models", preflight()
    )
    assert status == 405
    assert cors_headers(headers) == {}


def test_with_no_origins_no_middleware_is_installed() -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None: ...

    assert with_cors(())(app) is app


def test_origins_are_spelled_as_browsers_send_them() -> None:
    assert allowed_origins([" HTTPS://Chat.Example.com:443 ", "http://[::1]:5173", ""]) == (
        "https://chat.example.com",
        "http://[::1]:5173",
    )


@pytest.mark.parametrize(
    "origin",
    [
        "chat.example.com",
        "https://chat.example.com/",
        "https://chat.example.com/app",
        "https://user@chat.example.com",
        "https://chat.example.com:port",
        "null",
        "localhost:3000",
    ],
)
def test_a_malformed_origin_stops_start_up_naming_the_setting(origin: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="CORS_ALLOWED_ORIGINS"):
        allowed_origins([origin])


def test_a_star_must_stand_alone() -> None:
    with pytest.raises(ImproperlyConfigured, match="CORS_ALLOWED_ORIGINS"):
        allowed_origins(["*", "https://chat.example.com"])
