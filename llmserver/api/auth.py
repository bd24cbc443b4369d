"""Bearer API keys on the OpenAI surface."""

from __future__ import annotations

from collections.abc import Iterable

from llmserver.runtime.gateway import Gateway
from llmserver.runtime.keys import KeyInfo
from llmserver.wire.errors import unauthorized


def bearer(headers: Iterable[tuple[bytes, bytes]] | Iterable[list[bytes]]) -> str | None:
    for name, value in headers:
        if name.lower() == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            return None
    return None


async def authenticate(gw: Gateway, secret: str | None) -> KeyInfo:
    if not secret:
        raise unauthorized("Missing API key: send 'Authorization: Bearer <key>'.")
    key = await gw.keys.resolve(secret)
    if key is None:
        raise unauthorized("Invalid, revoked or expired API key.")
    return key
