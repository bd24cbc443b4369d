"""Who sees what, route by route: every route that takes an object id has rows here, and for each
row the owner of the object, a second user of the same tenant, the tenant's administrator,
another tenant and an anonymous caller each get exactly what `tenants/visibility.py` says. A
route added without a row fails `test_every_route_that_takes_an_id_has_a_row`.

The cast (`acme_cast`): alice (a member of acme, who made the object), bob (another member of
acme), ada (acme's administrator) and charlie (globex's administrator), each with a key they
made for themselves; on the API they call with that key, in the portal they are signed in.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver, path, reverse
from django.utils import timezone

from tenants.models import AppType, Batch, BatchStatus, Membership, Role
from tests.api.batch_helpers import call, chat_line, jsonl, upload
from tests.api.conftest import ACTORS, MODEL, AcmeCast, chat_body, read_all, start

LOGIN = 302  # a portal page sends an anonymous caller to sign in
ACCEPTED, REFUSED = 101, 4403  # a socket opened, or closed with the portal's FORBIDDEN

API = {"owner": 200, "same_tenant": 404, "tenant_admin": 200, "other_tenant": 404, "anonymous": 401}
TENANT_PAGE = {"owner": 200, "same_tenant": 200, "tenant_admin": 200, "other_tenant": 404}
ADMIN_PAGE = {"owner": 403, "same_tenant": 403, "tenant_admin": 200, "other_tenant": 404}
ADMIN_ACTION = {"owner": 403, "same_tenant": 403, "tenant_admin": 302, "other_tenant": 404}
OWN_KEY = {"owner": 200, "same_tenant": 404, "tenant_admin": 200, "other_tenant": 404}


# ---- the objects, each alice's -------------------------------------------------------------


async def a_file(acme_cast: AcmeCast) -> str:
    status, uploaded = await upload(acme_cast.keys["owner"] or "", jsonl([chat_line("a")]))
    assert status == 200, uploaded
    return str(uploaded["id"])


async def a_batch(acme_cast: AcmeCast) -> str:
    """Running, and held by another process's lease, so that this process's runner leaves it."""
    file_id = await a_file(acme_cast)
    now = timezone.now()
    batch = await sync_to_async(Batch.objects.create)(
        tenant=acme_cast.tenant,
        api_key=acme_cast.alice_key,
        user="alice",
        endpoint="/v1/chat/completions",
        input_file_id=file_id,
        status=BatchStatus.IN_PROGRESS,
        runner="another-process",
        lease_until=now + timedelta(hours=1),
        expires_at=now + timedelta(hours=24),
    )
    return str(batch.pk)


async def a_request(acme_cast: AcmeCast) -> str:
    """A long stream of alice's, running while the row is tried."""
    comm = await start(acme_cast.keys["owner"], chat_body(max_tokens=2000))
    head = await comm.receive_output(10)
    assert head["status"] == 200

    async def hang_up() -> None:
        await comm.send_input({"type": "http.disconnect"})

    acme_cast.cleanups.append(hang_up)
    return dict(head["headers"])[b"x-request-id"].decode()


# ---- the rows --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ApiRow:
    route: str
    method: str
    path: str  # with {id}
    make: Callable[[AcmeCast], Awaitable[str]]
    missing: str
    expect: dict[str, int] = field(default_factory=lambda: dict(API))


API_ROWS = [
    ApiRow("v1/files/<str:file_id>", "GET", "/v1/files/{id}", a_file, "file-nope"),
    ApiRow("v1/files/<str:file_id>", "DELETE", "/v1/files/{id}", a_file, "file-nope"),
    ApiRow("v1/files/<str:file_id>/content", "GET", "/v1/files/{id}/content", a_file, "file-nope"),
    ApiRow("v1/batches/<str:batch_id>", "GET", "/v1/batches/{id}", a_batch, "batch_nope"),
    ApiRow(
        "v1/batches/<str:batch_id>/cancel",
        "POST",
        "/v1/batches/{id}/cancel",
        a_batch,
        "batch_nope",
    ),
    ApiRow("v1/requests/<str:request_id>", "GET", "/v1/requests/{id}", a_request, "chatcmpl-x"),
]


@dataclass(frozen=True)
class PortalRow:
    route: str
    method: str
    name: str  # the portal's URL name
    target: str  # "tenant" (the slug only), "key" (alice's key) or "member" (alice's membership)
    expect: dict[str, int]


PORTAL_ROWS = [
    PortalRow("portal/<slug:slug>/", "get", "overview", "tenant", TENANT_PAGE),
    PortalRow("portal/<slug:slug>/queue/", "get", "queue", "tenant", TENANT_PAGE),
    PortalRow("portal/<slug:slug>/keys/", "get", "keys", "tenant", TENANT_PAGE),
    PortalRow("portal/<slug:slug>/keys/<int:key_id>/", "get", "key-edit", "key", OWN_KEY),
    PortalRow(
        "portal/<slug:slug>/keys/<int:key_id>/",
        "post",
        "key-edit",
        "key",
        {**OWN_KEY, "owner": 302, "tenant_admin": 302},
    ),
    PortalRow("portal/<slug:slug>/keys/<int:key_id>/rotate/", "post", "key-rotate", "key", OWN_KEY),
    PortalRow(
        "portal/<slug:slug>/keys/<int:key_id>/revoke/",
        "post",
        "key-revoke",
        "key",
        {**OWN_KEY, "owner": 302, "tenant_admin": 302},
    ),
    PortalRow("portal/<slug:slug>/members/", "get", "members", "tenant", ADMIN_PAGE),
    PortalRow(
        "portal/<slug:slug>/members/<int:member_id>/role/",
        "post",
        "member-role",
        "member",
        ADMIN_ACTION,
    ),
    PortalRow(
        "portal/<slug:slug>/members/<int:member_id>/remove/",
        "post",
        "member-remove",
        "member",
        ADMIN_ACTION,
    ),
    PortalRow("portal/<slug:slug>/audit/", "get", "audit", "tenant", ADMIN_PAGE),
]
SOCKET_ROWS = {
    "ws/portal/<slug:slug>/queue/": {
        "owner": ACCEPTED,
        "same_tenant": ACCEPTED,
        "tenant_admin": ACCEPTED,
        "other_tenant": REFUSED,
        "anonymous": REFUSED,
    }
}
# Routes with a path parameter that names no tenant's object, and why.
NOT_OBJECTS = {
    "^v1/models/(?P<model>.+)$": "a model name, the same for every tenant (a key that may not "
    "use it gets 404: tests/api/test_api_surface.py)",
    "admin/": "the operators' admin (staff only): no tenant signs in there",
    "admin/reports/<slug:table>.csv": "an operator's report table (staff only)",
    "^static/(?P<path>.*)$": "the admin's CSS and JavaScript",
    "oidc/": "single sign-on's own callbacks",
}


# ---- the routes, as the routers have them --------------------------------------------------


def _router_routes(app: Any) -> Iterator[Any]:
    """The routes of the URLRouter inside `app` (through Channels' middleware)."""
    while not isinstance(app, URLRouter):
        app = app.inner
    yield from app.routes


def _django_routes(resolver: URLResolver, prefix: str = "") -> Iterator[str]:
    for entry in resolver.url_patterns:
        route = prefix + str(entry.pattern)
        if route in NOT_OBJECTS:
            continue
        if isinstance(entry, URLResolver):
            yield from _django_routes(entry, route)
        elif isinstance(entry, URLPattern):
            yield route


def _takes_an_id(route: str) -> bool:
    return "<" in route or "(?P<" in route


def routes_with_ids() -> set[str]:
    from llmserver.asgi import application

    found: set[str] = set()
    for protocol in ("http", "websocket"):
        for route in _router_routes(application.application_mapping[protocol]):
            if isinstance(route, URLResolver):
                continue  # Channels' `path(...)` of an ASGI app is a resolver only for include()
            found.add(str(route.pattern))
    found |= set(_django_routes(get_resolver()))
    return {route for route in found if _takes_an_id(route)} - set(NOT_OBJECTS)


def test_every_route_that_takes_an_id_has_a_row() -> None:
    rows = {r.route for r in API_ROWS} | {r.route for r in PORTAL_ROWS} | set(SOCKET_ROWS)
    assert routes_with_ids() - rows == set(), "a route that takes an id needs rows here"
    assert rows - routes_with_ids() == set(), "a row for a route that is gone"


def test_every_row_says_what_each_caller_gets() -> None:
    for row in [*API_ROWS, *PORTAL_ROWS]:
        assert set(row.expect) | {"anonymous"} == set(ACTORS), row
    for expect in SOCKET_ROWS.values():
        assert set(expect) == set(ACTORS)


# ---- the API ---------------------------------------------------------------------------------


def _row_id(row: Any) -> str:
    return f"{row.method} {row.route}"


def _error_without_id(body: bytes, object_id: str) -> Any:
    data = json.loads(body)
    data["error"]["message"] = data["error"]["message"].replace(object_id, "ID")
    return data


@pytest.mark.parametrize("actor", ACTORS)
@pytest.mark.parametrize("row", API_ROWS, ids=_row_id)
async def test_an_api_route_answers_each_caller_as_the_rule_says(
    gateway: Any, acme_cast: AcmeCast, row: ApiRow, actor: str
) -> None:
    object_id = await row.make(acme_cast)
    try:
        key = acme_cast.keys[actor]
        status, _, body = await call(row.method, row.path.format(id=object_id), key)
        assert status == row.expect[actor], body
        if status in (401, 404):
            # Not one word more than for an id that does not exist: never a 403.
            absent, _, absent_body = await call(row.method, row.path.format(id=row.missing), key)
            assert absent == status
            assert _error_without_id(body, object_id) == _error_without_id(absent_body, row.missing)
    finally:
        for cleanup in acme_cast.cleanups:
            await cleanup()


async def _respond(key: str | None, **fields: Any) -> tuple[int, Any]:
    body = json.dumps({"model": MODEL, "max_output_tokens": 3, **fields}).encode()
    status, _, raw = await read_all(await start(key, body, "/v1/responses"))
    return status, json.loads(raw)


@pytest.mark.parametrize("actor", ACTORS)
async def test_a_previous_response_id_answers_each_caller_as_the_rule_says(
    gateway: Any, acme_cast: AcmeCast, actor: str
) -> None:
    """An id named in a body, by the same rule; this engine keeps no responses at all."""
    status, first = await _respond(acme_cast.keys["owner"], input="Mine")
    assert status == 200, first
    key = acme_cast.keys[actor]
    status, body = await _respond(key, input="Go on", previous_response_id=first["id"])
    assert status == API[actor], body
    if status in (401, 404):
        absent, absent_body = await _respond(key, input="Go on", previous_response_id="resp_x")
        assert absent == status
        assert json.dumps(body).replace(first["id"], "ID") == json.dumps(absent_body).replace(
            "resp_x", "ID"
        )


# ---- the portal ------------------------------------------------------------------------------


def _portal_args(acme_cast: AcmeCast, target: str, missing: bool) -> dict[str, Any]:
    args: dict[str, Any] = {"slug": acme_cast.tenant.slug}
    if target == "key":
        args["key_id"] = 999_999 if missing else acme_cast.alice_key.pk
    elif target == "member":
        alice = Membership.objects.get(user=acme_cast.people["owner"], tenant=acme_cast.tenant)
        args["member_id"] = 999_999 if missing else alice.pk
    return args


def _portal_call(acme_cast: AcmeCast, row: PortalRow, actor: str, missing: bool = False) -> Any:
    client = Client()
    if actor != "anonymous":
        client.force_login(acme_cast.people[actor])
    url = reverse(f"portal:{row.name}", kwargs=_portal_args(acme_cast, row.target, missing))
    data = {"role": Role.MEMBER}
    if row.name == "key-edit":  # every field an administrator's form has; a member's: the name
        data = {"name": "renamed", "user": "alice", "app_type": AppType.CHAT}
    return client.get(url) if row.method == "get" else client.post(url, data)


@pytest.mark.parametrize("actor", ACTORS)
@pytest.mark.parametrize("row", PORTAL_ROWS, ids=_row_id)
def test_a_portal_route_answers_each_caller_as_the_rule_says(
    acme_cast: AcmeCast, row: PortalRow, actor: str
) -> None:
    response = _portal_call(acme_cast, row, actor)
    if actor == "anonymous":
        assert response.status_code == LOGIN and "/portal/login/" in response["Location"]
        return
    assert response.status_code == row.expect[actor]
    if row.target != "tenant" and response.status_code in (403, 404):
        # The refusal does not depend on whether the id exists.
        assert _portal_call(acme_cast, row, actor, missing=True).status_code == response.status_code


@pytest.mark.parametrize("actor", ACTORS)
@pytest.mark.parametrize("route", list(SOCKET_ROWS))
async def test_a_portal_socket_answers_each_caller_as_the_rule_says(
    acme_cast: AcmeCast, route: str, actor: str
) -> None:
    from llmserver import dashboard

    app = URLRouter([path(route, dashboard.TenantQueueConsumer.as_asgi())])
    socket = WebsocketCommunicator(app, f"/ws/portal/{acme_cast.tenant.slug}/queue/")
    socket.scope["user"] = acme_cast.people[actor]
    connected, code = await socket.connect()
    assert (ACCEPTED if connected else code) == SOCKET_ROWS[route][actor]
    await socket.disconnect()
