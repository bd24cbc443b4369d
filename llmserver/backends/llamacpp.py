"""llama.cpp's llama-server as a backend: where its health and its capacity are read.

Its metrics names live with the others' in its profile (`tenants.backend_kinds`). Capacity is the number of slots
(`-np`, continuous-batching sequences): requests beyond it wait in the server's own FIFO, counted
by `llamacpp:requests_deferred`. The gateway's metrics poller reads it from the server itself
(`read_capacity`), so its exact slot accounting works without an operator copying `-np` by hand.
"""

from __future__ import annotations

from typing import Any

import httpx

# 200 {"status": "ok"} once the model is loaded (server-context.cpp, get_health); 503 "Loading
# model" before that (server-http.cpp, its middleware). Paths are under tools/server/.
HEALTH_PATH = "/health"
PROPS_PATH = "/props"
SLOTS_PATH = "/slots"


def capacity_from_props(props: Any) -> int | None:
    """`total_slots` of a `/props` answer (server-context.cpp, get_res_props: `-np`), if any."""
    total = props.get("total_slots") if isinstance(props, dict) else None
    return total if isinstance(total, int) and not isinstance(total, bool) and total > 0 else None


async def read_capacity(client: httpx.AsyncClient, base_url: str = "") -> int | None:
    """How many requests the server runs at once: `/props` total_slots, else the length of
    `/slots` (disabled with --no-slots); None when neither answers."""
    root = base_url.rstrip("/")
    try:
        response = await client.get(root + PROPS_PATH)
        if response.status_code == 200:
            total = capacity_from_props(response.json())
            if total is not None:
                return total
        response = await client.get(root + SLOTS_PATH)
        if response.status_code == 200:
            slots = response.json()
            if isinstance(slots, list) and slots:
                return len(slots)
    except (httpx.HTTPError, ValueError):
        return None
    return None


async def is_healthy(client: httpx.AsyncClient, base_url: str = "") -> bool:
    """True once the server has loaded its model and takes requests."""
    try:
        response = await client.get(base_url.rstrip("/") + HEALTH_PATH)
    except httpx.HTTPError:
        return False
    return response.status_code == 200
