"""The live queue dashboard: its page and its WebSocket, staff only, fed by scheduler snapshots;
and the tenant's own live queue for its portal page, its lanes only.

The gateway's publisher (`llmserver.runtime.snapshots`) sends a snapshot every half second or so
while the scheduler changes; every connected dashboard in the channel-layer group receives it. A new connection
gets the latest snapshot this process has seen at once, so the page never starts blank.
"""

from __future__ import annotations

import time
from typing import Any

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse

from llmserver.runtime.snapshots import GROUP, latest_snapshot
from tenants.models import Band, Membership, Role

WS_PATH = "ws/admin/dashboard/"
FORBIDDEN = 4403


def dashboard_view(request: HttpRequest) -> HttpResponse:
    context = {
        **admin.site.each_context(request),
        "title": "Live queues",
        "ws_path": "/" + WS_PATH,
        "band_names": {int(value): str(label) for value, label in Band.choices},
    }
    return TemplateResponse(request, "admin/reports/dashboard.html", context)


class SnapshotSocket(AsyncJsonWebsocketConsumer):
    """A page fed by the scheduler's snapshots: `join()` once its visitor may see them, then
    every snapshot published, the latest first, goes through `forward`. Pages only listen."""

    async def join(self) -> None:
        await self.channel_layer.group_add(GROUP, self.channel_name)
        await self.accept()
        latest = latest_snapshot()
        if latest is not None:
            await self.forward(latest)

    async def forward(self, snapshot: dict[str, Any]) -> None:
        raise NotImplementedError

    async def disconnect(self, code: int) -> None:
        await self.channel_layer.group_discard(GROUP, self.channel_name)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """Anything a client sends is ignored."""

    async def dashboard_snapshot(self, event: dict[str, Any]) -> None:
        await self.forward(event["snapshot"])


class DashboardConsumer(SnapshotSocket):
    """Joins the group when the session belongs to active staff with the dashboard permission;
    refuses everyone else."""

    async def connect(self) -> None:
        user = self.scope.get("user")
        if not (
            user
            and user.is_authenticated
            and user.is_active
            and user.is_staff
            and await database_sync_to_async(user.has_perm)("tenants.view_queue_dashboard")
        ):
            await self.close(code=FORBIDDEN)
            return
        await self.join()

    async def forward(self, snapshot: dict[str, Any]) -> None:
        await self.send_json({"type": "snapshot", "snapshot": snapshot})


TENANT_WS_PATH = "ws/portal/<slug:slug>/queue/"
# How often an open tenant page's right to it is checked again: a person removed from the tenant
# (or made a member, who sees less) stops receiving its lanes within this long.
RECHECK_SECONDS = 10.0
# The operator's reasons name backends, gate thresholds and other principals' queued work; a
# tenant's page says the cause only.
_TENANT_REASONS = (
    ("gate closed", "the backends are busy"),
    ("behind a higher band", "behind higher-priority work"),
)


def tenant_reason(reason: str) -> str:
    """An operator's waiting reason as a tenant may read it."""
    parts = []
    for part in reason.split("; ") if reason else []:
        parts.append(next((say for start, say in _TENANT_REASONS if part.startswith(start)), part))
    return "; ".join(parts)


def tenant_lanes(snapshot: dict[str, Any], tenant: str, user: str | None) -> list[dict[str, Any]]:
    """The lanes of one tenant (of one of its people, when `user` is given), with reasons a
    tenant may read: all a tenant's page sees of a snapshot. Backends and totals are the whole
    gateway's and are left out."""
    return [
        {**lane, "waiting_reason": tenant_reason(lane.get("waiting_reason", ""))}
        for lane in snapshot.get("queues", [])
        if lane["tenant"] == tenant and user in (None, lane["user"])
    ]


def _role(user_id: int, slug: str) -> str | None:
    role: str | None = Membership.objects.of(user_id, slug).values_list("role", flat=True).first()
    return role


class TenantQueueConsumer(SnapshotSocket):
    """The portal's live queue: a member of the tenant in the path receives that tenant's lanes
    (a member, the lanes of their own name) from every snapshot, whichever process leads the
    scheduler; anyone else is refused, and a page whose person has left the tenant is closed."""

    tenant = ""
    user: str | None = None
    user_id = 0
    username = ""
    checked = 0.0

    async def connect(self) -> None:
        scope_user = self.scope.get("user")
        if scope_user is None or not (scope_user.is_authenticated and scope_user.is_active):
            await self.close(code=FORBIDDEN)
            return
        self.tenant = self.scope["url_route"]["kwargs"]["slug"]
        self.user_id, self.username = scope_user.pk, scope_user.get_username()
        if not await self._allowed():
            await self.close(code=FORBIDDEN)
            return
        await self.join()

    async def _allowed(self) -> bool:
        """Whether the person is still in the tenant, as of now; sets what they may see."""
        role = await database_sync_to_async(_role)(self.user_id, self.tenant)
        self.checked = time.monotonic()
        self.user = None if role == Role.ADMIN else self.username
        return role is not None

    async def forward(self, snapshot: dict[str, Any]) -> None:
        stale = time.monotonic() - self.checked > RECHECK_SECONDS
        if stale and not await self._allowed():
            await self.close(code=FORBIDDEN)
            return
        lanes = tenant_lanes(snapshot, self.tenant, self.user)
        await self.send_json({"type": "queue", "wall": snapshot.get("wall"), "lanes": lanes})
