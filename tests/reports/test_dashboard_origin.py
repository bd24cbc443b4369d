"""The dashboard socket, through the real ASGI routing, opens only for pages of this site."""

from __future__ import annotations

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.test import Client

from llmserver import dashboard
from tests.reports.operators import operator

pytestmark = pytest.mark.django_db(transaction=True)


def staff_cookie() -> bytes:
    client = Client()
    client.force_login(operator())
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def connect(origin: bytes | None) -> tuple[bool, int | str | None]:
    from llmserver.asgi import application

    cookie = await sync_to_async(staff_cookie)()
    headers = [(b"host", b"localhost:8000"), (b"cookie", cookie)]
    if origin is not None:
        headers.append((b"origin", origin))
    socket = WebsocketCommunicator(application, "/" + dashboard.WS_PATH, headers=headers)
    connected, code = await socket.connect(timeout=5)
    if connected:
        await socket.disconnect()
    return connected, code


async def test_a_staff_page_of_this_site_opens_the_dashboard() -> None:
    assert (await connect(b"http://localhost:8000"))[0] is True


async def test_a_foreign_page_cannot_open_the_dashboard_with_a_staff_cookie() -> None:
    assert (await connect(b"https://evil.example"))[0] is False


async def test_a_socket_without_an_origin_cannot_open_the_dashboard() -> None:
    assert (await connect(None))[0] is False
