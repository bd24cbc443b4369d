"""Who is changing the configuration now, for the audit trail (`tenants.audit`): the admin
user or the self-service API key of the current request and its client address, the management
command being run, or the system.

`audit_context` is a middleware (sync and async) that holds the current request in a context
variable while the view runs; the user is read only when a change is recorded, so a DRF view's
API key counts (DRF sets the key's principal as the request's user once it authenticates).
`acting_as` names who acts inside a request when no one is signed in yet: a single sign-on login
that creates the user and applies the identity provider's roles before Django logs them in.
`name_commands` wraps `BaseCommand.execute` so that a change made by `manage.py <command>` or
`call_command` names the command: Django has no hook for a command's start.
"""

from __future__ import annotations

import functools
import ipaddress
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from asgiref.sync import iscoroutinefunction
from django.conf import settings
from django.core.management.base import BaseCommand
from django.http import HttpRequest
from django.http.response import HttpResponseBase
from django.utils.decorators import sync_and_async_middleware

from tenants.models.audit import ActorKind
from tenants.models.keys import ApiKey

_request: ContextVar[HttpRequest | None] = ContextVar("audit_request", default=None)
_command: ContextVar[str | None] = ContextVar("audit_command", default=None)
_acting: ContextVar[str | None] = ContextVar("audit_acting", default=None)


@dataclass(frozen=True)
class Actor:
    kind: ActorKind
    name: str
    address: str | None = None


def current_actor() -> Actor:
    """Who is changing things now: the request's user or API key, the command, or the system."""
    request = _request.get()
    acting = _acting.get()
    if request is not None:
        address = client_address(request.META, settings.TRUSTED_PROXIES)
        if acting is not None:
            return Actor(ActorKind.SYSTEM, acting, address)
        user = getattr(request, "user", None)
        key = getattr(user, "api_key", None)
        if isinstance(key, ApiKey):
            return Actor(ActorKind.API_KEY, f"key {key}", address)
        if user is not None and user.is_authenticated:
            return Actor(ActorKind.USER, user.get_username(), address)
        return Actor(ActorKind.SYSTEM, "anonymous request", address)
    command = _command.get()
    if command is not None:
        return Actor(ActorKind.COMMAND, f"manage.py {command}")
    return Actor(ActorKind.SYSTEM, acting or "system")


@contextmanager
def acting_as(name: str) -> Iterator[None]:
    """Changes made inside are the system's, named `name`, from the request's address."""
    token = _acting.set(name)
    try:
        yield
    finally:
        _acting.reset(token)


@functools.lru_cache(maxsize=8)
def _networks(
    trusted: tuple[str, ...],
) -> tuple[ipaddress.IPv4Network | ipaddress.IPv6Network, ...]:
    return tuple(ipaddress.ip_network(n, strict=False) for n in trusted)


def _ip(text: object) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    try:
        ip = ipaddress.ip_address(str(text).strip())
    except ValueError:
        return None
    # A dual-stack listener reports an IPv4 peer as ::ffff:a.b.c.d; TRUSTED_PROXIES names a.b.c.d.
    mapped = ip.ipv4_mapped if isinstance(ip, ipaddress.IPv6Address) else None
    return mapped or ip


def client_address(meta: dict[str, Any], trusted: Sequence[str]) -> str | None:
    """The client's address: the TCP peer, or, when the peer is one of the `trusted` proxies
    (TRUSTED_PROXIES), the rightmost `X-Forwarded-For` hop that is not a trusted proxy. Hops
    left of that one were written by the client and could say anything."""
    peer = _ip(meta.get("REMOTE_ADDR"))
    networks = _networks(tuple(trusted))
    if peer is None or not any(peer in n for n in networks):
        return None if peer is None else str(peer)
    address = peer
    hops = [hop for hop in str(meta.get("HTTP_X_FORWARDED_FOR", "")).split(",") if hop.strip()]
    for hop in reversed(hops):
        ip = _ip(hop)
        if ip is None:
            break
        address = ip
        if not any(ip in n for n in networks):
            break
    return str(address)


Handler = Callable[[HttpRequest], HttpResponseBase]
AsyncHandler = Callable[[HttpRequest], Awaitable[HttpResponseBase]]


@sync_and_async_middleware
def audit_context(get_response: Any) -> Any:
    """Middleware: the current request, for `current_actor`, while the view runs."""
    if iscoroutinefunction(get_response):
        handle_async: AsyncHandler = get_response

        async def middleware_async(request: HttpRequest) -> HttpResponseBase:
            token = _request.set(request)
            try:
                return await handle_async(request)
            finally:
                _request.reset(token)

        return middleware_async
    handle: Handler = get_response

    def middleware(request: HttpRequest) -> HttpResponseBase:
        token = _request.set(request)
        try:
            return handle(request)
        finally:
            _request.reset(token)

    return middleware


def name_commands() -> None:
    """Wrap `BaseCommand.execute` so a change made by `manage.py <command>` (or `call_command`)
    names it. Django has no hook for a command's start; this wrapper is the one it needs."""
    execute = BaseCommand.execute
    if getattr(execute, "names_the_command", False):
        return

    @functools.wraps(execute)
    def execute_named(self: BaseCommand, *args: Any, **options: Any) -> str | None:
        token = _command.set(type(self).__module__.rsplit(".", 1)[-1])
        try:
            return execute(self, *args, **options)
        finally:
            _command.reset(token)

    execute_named.names_the_command = True  # type: ignore[attr-defined]
    setattr(BaseCommand, "execute", execute_named)  # noqa: B010  (mypy refuses a method assignment)
