"""Bearer API keys on the OpenAI surface."""

from __future__ import annotations

from collections.abc import Iterable

from llmserver.runtime.keys import KeyCache, KeyInfo
from llmserver.wire.errors import unauthorized


def bearer(headers: Iterable[tuple[bytes, bytes]] | Iterable[list[bytes]]) -> str | None:
    """The key from `Authorization: Bearer <key>`, or from `x-api-key` (what Anthropic's SDKs
    send) where there is no Authorization header."""
    api_key = None
    for name, value in headers:
        name = name.lower()
        if name == b"authorization":
            scheme, _, token = value.decode("latin-1").partition(" ")
            if scheme.lower() == "bearer" and token.strip():
                return token.strip()
            return None
        if name == b"x-api-key" and value.strip():
            api_key = value.decode("latin-1").strip()
    return api_key


async def authenticate(keys: KeyCache, secret: str | None) -> KeyInfo:
    """The key `secret` names, through the key cache; raises ApiError (401)."""
    if not secret:
        raise unauthorized("Missing API key: send 'Authorization: Bearer <key>'.")
    key = await keys.resolve(secret)
    if key is None:
        raise unauthorized("Invalid, revoked or expired API key.")
    return key
