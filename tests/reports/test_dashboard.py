"""The dashboard socket: staff only, and every published snapshot reaches every open page."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser, User
from django.urls import path

from llmserver import dashboard
from llmserver.dashboard import DashboardConsumer
from llmserver.runtime import snapshots
from llmserver.runtime.snapshots import publish_snapshot
from tests.reports.operators import operator

SNAP = {
    "at": 1.0,
    "queues": [
        {
            "model": "m",
            "band": 0,
            "tenant": "acme",
            "user": "alice",
            "depth": 2,
            "in_flight": 1,
            "service": 3.5,
        }
    ],
    "backends": [],
    "totals": {
        "queued": 2,
        "in_flight": 1,
        "dispatched": 1,
        "completed": 0,
        "cancelled": 0,
        "expired": 0,
        "rejected": 0,
    },
}

pytestmark = pytest.mark.django_db(transaction=True)


def socket(user: Any) -> WebsocketCommunicator:
    app = URLRouter([path(dashboard.WS_PATH, DashboardConsumer.as_asgi())])
    communicator = WebsocketCommunicator(app, "/" + dashboard.WS_PATH)
    communicator.scope["user"] = user
    return communicator


@pytest.fixture(autouse=True)
def no_latest() -> None:
    snapshots._latest = None


async def test_it_refuses_anonymous_visitors() -> None:
    connected, code = await socket(AnonymousUser()).connect()
    assert (connected, code) == (False, dashboard.FORBIDDEN)


async def test_it_refuses_logged_in_non_staff() -> None:
    member = await sync_to_async(User.objects.create_user)("member")
    connected, _ = await socket(member).connect()
    assert connected is False


async def test_it_refuses_staff_without_the_dashboard_permission() -> None:
    editor = await sync_to_async(operator)("editor", codenames=("view_usage_report",))
    connected, code = await socket(editor).connect()
    assert (connected, code) == (False, dashboard.FORBIDDEN)


async def test_it_pushes_each_snapshot_to_every_staff_page() -> None:
    op = await sync_to_async(operator)()
    pages = [socket(op), socket(op)]
    for page in pages:
        assert (await page.connect())[0]
    await publish_snapshot(SNAP)
    for page in pages:
        assert await page.receive_json_from(timeout=2) == {"type": "snapshot", "snapshot": SNAP}
        await page.disconnect()


async def test_it_greets_a_new_page_with_the_latest_snapshot() -> None:
    op = await sync_to_async(operator)()
    await publish_snapshot(SNAP)
    page = socket(op)
    await page.connect()
    assert (await page.receive_json_from(timeout=2))["snapshot"]["totals"]["queued"] == 2
    await page.disconnect()


async def test_it_stops_sending_after_disconnect() -> None:
    op = await sync_to_async(operator)()
    page = socket(op)
    await page.connect()
    await page.disconnect()
    await publish_snapshot(SNAP)
    assert await page.receive_nothing(timeout=0.1)
