"""The portal's live queue socket: a tenant's people receive their tenant's lanes (a member,
their own) from every snapshot; nobody else is let in."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.urls import path

from llmserver import dashboard
from llmserver.runtime import snapshots
from llmserver.runtime.snapshots import publish_snapshot
from tenants.models import Membership, Role, Tenant, Tier

pytestmark = pytest.mark.django_db(transaction=True)


OPERATORS_REASON = (
    "per-user concurrency cap (4 of 4 in flight); gate closed: gpu-1 waiting >= 8; "
    "behind a higher band (17 queued)"
)


def lane(tenant: str, user: str, depth: int) -> dict[str, Any]:
    return {
        "model": "m",
        "band": 0,
        "tenant": tenant,
        "user": user,
        "depth": depth,
        "in_flight": 0,
        "service": 0.0,
        "waiting_reason": OPERATORS_REASON,
    }


SNAP = {
    "queues": [lane("acme", "alice", 3), lane("acme", "ben", 1), lane("globex", "charlie", 9)],
    "backends": [{"name": "gpu-1", "in_flight": 12}],
    "totals": {"queued": 13},
    "wall": 1.0,
}


def socket(user: Any, slug: str = "acme") -> WebsocketCommunicator:
    app = URLRouter([path(dashboard.TENANT_WS_PATH, dashboard.TenantQueueConsumer.as_asgi())])
    communicator = WebsocketCommunicator(app, f"/ws/portal/{slug}/queue/")
    communicator.scope["user"] = user
    return communicator


@pytest.fixture(autouse=True)
def no_latest() -> None:
    snapshots._latest = None


def person(name: str, slug: str, role: str) -> Any:
    tier = Tier.objects.get_or_create(name="t")[0]
    tenant = Tenant.objects.get_or_create(slug=slug, defaults={"name": slug, "default_tier": tier})[
        0
    ]
    user = get_user_model().objects.create_user(name)
    Membership.objects.create(user=user, tenant=tenant, role=role)
    return user


async def received(user: Any) -> list[str]:
    page = socket(user)
    connected, _ = await page.connect()
    assert connected
    await publish_snapshot(SNAP)
    message = await page.receive_json_from(timeout=2)
    await page.disconnect()
    assert message["type"] == "queue" and "backends" not in message and "totals" not in message
    return [f"{x['tenant']}/{x['user']}" for x in message["lanes"]]


async def test_an_administrator_receives_every_lane_of_the_tenant_and_no_other() -> None:
    ada = await sync_to_async(person)("ada", "acme", Role.ADMIN)
    assert await received(ada) == ["acme/alice", "acme/ben"]


async def test_a_member_receives_only_their_own_lanes() -> None:
    ben = await sync_to_async(person)("ben", "acme", Role.MEMBER)
    assert await received(ben) == ["acme/ben"]


async def test_a_person_of_another_tenant_is_refused() -> None:
    await sync_to_async(person)("ada", "acme", Role.ADMIN)
    gil = await sync_to_async(person)("gil", "globex", Role.ADMIN)
    connected, code = await socket(gil).connect()
    assert (connected, code) == (False, dashboard.FORBIDDEN)


async def test_a_stranger_is_refused() -> None:
    connected, code = await socket(AnonymousUser()).connect()
    assert (connected, code) == (False, dashboard.FORBIDDEN)


async def test_the_latest_snapshot_arrives_on_connecting() -> None:
    ada = await sync_to_async(person)("ada", "acme", Role.ADMIN)
    snapshots._latest = SNAP
    page = socket(ada)
    await page.connect()
    assert len((await page.receive_json_from(timeout=2))["lanes"]) == 2
    await page.disconnect()


async def test_a_tenant_reads_why_it_waits_without_the_backends_or_other_tenants_work() -> None:
    ada = await sync_to_async(person)("ada", "acme", Role.ADMIN)
    page = socket(ada)
    await page.connect()
    await publish_snapshot(SNAP)
    (first, _) = (await page.receive_json_from(timeout=2))["lanes"]
    await page.disconnect()
    assert first["waiting_reason"] == (
        "per-user concurrency cap (4 of 4 in flight); the backends are busy; "
        "behind higher-priority work"
    )


async def test_a_page_whose_person_left_the_tenant_is_closed(monkeypatch) -> None:
    ada = await sync_to_async(person)("ada", "acme", Role.ADMIN)
    page = socket(ada)
    await page.connect()
    await sync_to_async(Membership.objects.filter(user=ada).delete)()
    monkeypatch.setattr(dashboard, "RECHECK_SECONDS", 0.0)
    await publish_snapshot(SNAP)
    assert (await page.receive_output(timeout=2))["type"] == "websocket.close"
