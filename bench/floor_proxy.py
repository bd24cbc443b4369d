"""The floor under the gateway's overhead: daphne serving an ASGI app that does nothing but relay
each request to the backend over one pooled aiohttp session (the gateway's own upstream client)
and its response back, chunk by chunk. No key check, admission, scheduler, usage row or log.

`overhead.py --floor` runs it as a third target beside "direct" and "gateway": what it adds over
"direct" is what daphne, Twisted, ASGI and the upstream hop cost on this machine, whatever the
gateway does; what the gateway adds over it is LLM-Server's own work.

    FLOOR_UPSTREAM=http://127.0.0.1:8001 daphne -b 127.0.0.1 -p 8000 floor_proxy:application
"""

from __future__ import annotations

import os
from typing import Any

import aiohttp

UPSTREAM = os.environ.get("FLOOR_UPSTREAM", "http://127.0.0.1:8001")
_session: aiohttp.ClientSession | None = None


def session() -> aiohttp.ClientSession:
    global _session
    if _session is None:
        connector = aiohttp.TCPConnector(limit=1024, keepalive_timeout=4.0)
        _session = aiohttp.ClientSession(UPSTREAM, connector=connector)
    return _session


async def application(scope: dict[str, Any], receive: Any, send: Any) -> None:
    if scope["type"] != "http":
        return
    body = b""
    while True:
        message = await receive()
        body += message.get("body", b"")
        if not message.get("more_body"):
            break
    headers = {"content-type": "application/json"}
    async with session().post(scope["path"], data=body, headers=headers) as response:
        relayed = [(b"content-type", response.headers["content-type"].encode())]
        await send({"type": "http.response.start", "status": response.status, "headers": relayed})
        async for chunk in response.content.iter_any():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})
    await send({"type": "http.response.body", "body": b""})
