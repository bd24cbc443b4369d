"""Consumer tests: the real gateway runtime in-process, against the simulator on loopback."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from channels.testing import ApplicationCommunicator
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser

from simulator.launcher import RunningSimulator, start_simulator
from tenants.models import (
    ApiKey,
    AppType,
    Backend,
    Band,
    Membership,
    ModelRoute,
    Role,
    Tenant,
    Tier,
)

MODEL = "demo-llama"


@pytest.fixture(scope="session")
def simulator() -> Iterator[RunningSimulator]:
    sim = start_simulator("--max-num-seqs", "4", "--model", MODEL, "--speed", "10")
    yield sim
    sim.stop()


@pytest.fixture
def world(transactional_db: None, simulator: RunningSimulator, settings: Any) -> dict[str, Any]:
    """A tenant with a tight tier (one at a time, two queued) routed to the simulator."""
    from tenants.budget import cache as spend_cache

    # The database reuses ids between tests; a cached month spend must not leak across them.
    spend_cache.clear()
    settings.LLMSERVER = {
        **settings.LLMSERVER,
        "SCRAPE_INTERVAL": 0.05,
        "USAGE_FLUSH_INTERVAL": 0.05,
        # Rate windows in memory: in Redis they would outlive the test, and ids repeat.
        "RATE_LIMIT_REDIS_URL": "",
    }
    tight = Tier.objects.create(
        name="tight",
        band=Band.INTERACTIVE,
        max_concurrent_per_user=1,
        max_queued_per_user=2,
        queue_timeout_seconds=30,
        gate_max_waiting=3,
        gate_max_tpot_ms=None,
    )
    acme = Tenant.objects.create(name="Acme", slug="acme", default_tier=tight)
    backend = Backend.objects.create(name="sim", base_url=simulator.url, kind="vllm")
    ModelRoute.objects.create(public_name=MODEL, backend=backend)
    _, alice = ApiKey.objects.create_key(tenant=acme, user="alice", app_type=AppType.CHAT)
    return {"alice": alice, "tier": tight, "tenant": acme, "backend": backend, "sim": simulator}


# Who calls, in the tests of who sees what: the maker of an object, another user of its tenant,
# the tenant's administrator, another tenant, and nobody.
ACTORS = ("owner", "same_tenant", "tenant_admin", "other_tenant", "anonymous")
NAMES = {"owner": "alice", "same_tenant": "bob", "tenant_admin": "ada", "other_tenant": "charlie"}


@dataclass
class AcmeCast:
    """Each actor's key (made by them for themselves) and person (to sign in to the portal)."""

    tenant: Tenant
    keys: dict[str, str | None]
    people: dict[str, Any]
    alice_key: ApiKey
    cleanups: list[Callable[[], Awaitable[None]]] = field(default_factory=list)


@pytest.fixture
def acme_cast(world: dict[str, Any], settings: Any, tmp_path: Path) -> AcmeCast:
    """alice and bob, members of acme; ada, its administrator; charlie, globex's."""
    settings.LLMSERVER = {**settings.LLMSERVER, "FILES_DIR": str(tmp_path / "files")}
    acme: Tenant = world["tenant"]
    globex = Tenant.objects.create(name="Globex", slug="globex", default_tier=world["tier"])
    keys: dict[str, str | None] = {"anonymous": None}
    people: dict[str, Any] = {"anonymous": AnonymousUser()}
    made: dict[str, ApiKey] = {}
    roles = {"owner": Role.MEMBER, "same_tenant": Role.MEMBER}
    for actor, name in NAMES.items():
        tenant = globex if actor == "other_tenant" else acme
        person = get_user_model().objects.create_user(name, f"{name}@example.com", "pw-long-x")
        Membership.objects.create(user=person, tenant=tenant, role=roles.get(actor, Role.ADMIN))
        made[actor], keys[actor] = ApiKey.objects.create_key(
            tenant=tenant, user=name, owner=person, app_type=AppType.CHAT
        )
        people[actor] = person
    return AcmeCast(acme, keys, people, made["owner"])


@pytest.fixture
async def gateway(world: dict[str, Any]) -> AsyncIterator[Any]:
    from llmserver.process import get_gateway, reset_gateway

    gw = await get_gateway()
    await wait_for(lambda: gate_open(gw), 5.0)
    yield gw
    await reset_gateway()


def gate_open(gw: Any) -> bool:
    snap = gw.snapshot()
    return bool(snap.backends and snap.backends[0].gates[0].open)


async def wait_for(condition: Any, timeout: float) -> None:
    deadline = asyncio.get_running_loop().time() + timeout
    while not condition():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError("condition not met in time")
        await asyncio.sleep(0.02)


def chat_body(max_tokens: int = 8, stream: bool = True, **extra: Any) -> bytes:
    return json.dumps(
        {
            "model": MODEL,
            "stream": stream,
            "max_tokens": max_tokens,
            "messages": [{"role": "user", "content": "Tell me something"}],
            **extra,
        }
    ).encode()


def open_request(
    key: str | None,
    body: bytes,
    path: str = "/v1/chat/completions",
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> ApplicationCommunicator:
    """A POST of `body`, with `key` as a bearer key (None: no Authorization) and `headers`."""
    from llmserver.asgi import application

    return ApplicationCommunicator(application, post_scope(key, body, path, headers))


def post_scope(
    key: str | None,
    body: bytes,
    path: str = "/v1/chat/completions",
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> dict[str, Any]:
    """The ASGI scope of `open_request`'s POST."""
    bearer = [] if key is None else [(b"authorization", f"Bearer {key}".encode())]
    return {
        "type": "http",
        "http_version": "1.1",
        "method": "POST",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "headers": [
            *bearer,
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode()),
            *headers,
        ],
        "client": ("127.0.0.1", 5000),
        "server": ("127.0.0.1", 8000),
    }


async def start(
    key: str | None,
    body: bytes,
    path: str = "/v1/chat/completions",
    headers: Iterable[tuple[bytes, bytes]] = (),
) -> ApplicationCommunicator:
    comm = open_request(key, body, path, headers)
    await comm.send_input({"type": "http.request", "body": body, "more_body": False})
    return comm


async def read_all(
    comm: ApplicationCommunicator, timeout: float = 10
) -> tuple[int, dict[bytes, bytes], bytes]:
    head = await comm.receive_output(timeout)
    assert head["type"] == "http.response.start"
    body = b""
    while True:
        message = await comm.receive_output(timeout)
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    return head["status"], dict(head["headers"]), body


async def simulator_metric(sim: RunningSimulator, name: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    async with httpx.AsyncClient() as client:
        text = (await client.get(sim.url + "/metrics")).text
    total = 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.name == name:
                total += sample.value
    return total


usage_rows = sync_to_async(
    lambda: list(
        __import__("tenants.models", fromlist=["UsageRecord"])
        .UsageRecord.objects.order_by("queued_at")
        .values()
    )
)
