"""/metrics names tenants and counts their tokens: a token and/or an address allow-list lock it."""

from __future__ import annotations

from typing import Any

import pytest

from llmserver.process import get_gateway, reset_gateway
from tests.api.conftest import read_all


async def scrape(
    token: str | None = None, client: str = "127.0.0.1"
) -> tuple[int, dict[bytes, bytes], bytes]:
    from channels.testing import ApplicationCommunicator

    from llmserver.asgi import application

    headers = [(b"authorization", f"Bearer {token}".encode())] if token is not None else []
    scope = {
        "type": "http",
        "http_version": "1.1",
        "method": "GET",
        "path": "/metrics",
        "raw_path": b"/metrics",
        "query_string": b"",
        "headers": headers,
        "client": (client, 40000),
        "server": ("127.0.0.1", 8000),
    }
    comm = ApplicationCommunicator(application, scope)
    await comm.send_input({"type": "http.request", "body": b"", "more_body": False})
    return await read_all(comm)


@pytest.fixture
async def locked(world: dict[str, Any], settings: Any, request: Any) -> Any:
    settings.LLMSERVER = {**settings.LLMSERVER, **request.param}
    await reset_gateway()
    yield await get_gateway()
    await reset_gateway()


@pytest.mark.parametrize("locked", [{}], indirect=True)
async def test_metrics_are_open_when_no_lock_is_set(locked: Any) -> None:
    status, _, body = await scrape(client="203.0.113.9")
    assert status == 200 and b"llmserver_requests" in body


@pytest.mark.parametrize("locked", [{"METRICS_TOKEN": "s3cret"}], indirect=True)
async def test_metrics_need_the_token_when_one_is_set(locked: Any) -> None:
    for token in (None, "wrong", "s3cre"):
        status, _, body = await scrape(token)
        assert status == 401 and b'"code": "invalid_api_key"' in body
    status, _, body = await scrape("s3cret")
    assert status == 200 and b"llmserver_requests" in body


@pytest.mark.parametrize("locked", [{"METRICS_ALLOW": ("10.0.0.0/8", "::1/128")}], indirect=True)
async def test_metrics_answer_only_allowed_networks_when_a_list_is_set(locked: Any) -> None:
    assert (await scrape(client="10.1.2.3"))[0] == 200
    assert (await scrape(client="::1"))[0] == 200
    status, _, body = await scrape(client="192.168.0.7")
    assert status == 403 and b'"type": "permission_error"' in body
    assert (await scrape(client="not-an-ip"))[0] == 403


@pytest.mark.parametrize(
    "locked", [{"METRICS_ALLOW": ("127.0.0.0/8",), "METRICS_TOKEN": "s3cret"}], indirect=True
)
async def test_with_both_locks_set_a_scrape_must_pass_both(locked: Any) -> None:
    assert (await scrape("s3cret", "127.0.0.1"))[0] == 200
    assert (await scrape(None, "127.0.0.1"))[0] == 401
    assert (await scrape("s3cret", "192.0.2.1"))[0] == 403


def test_a_bad_network_in_metrics_allow_stops_start_up(monkeypatch: Any) -> None:
    from django.core.exceptions import ImproperlyConfigured

    from llmserver.env import env_cidrs

    monkeypatch.setenv("METRICS_ALLOW", "10.0.0.0/8, intranet")
    with pytest.raises(ImproperlyConfigured, match="intranet"):
        env_cidrs("METRICS_ALLOW")
    monkeypatch.setenv("METRICS_ALLOW", "10.0.0.1/8,::1")
    assert env_cidrs("METRICS_ALLOW") == ("10.0.0.0/8", "::1/128")
