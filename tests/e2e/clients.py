"""What the end-to-end tests do as a client: stream a chat, stopping when told, and read the bill."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from typing import Any

import httpx

from llmserver.testing.processes import GatewayProcess


def stream_chat(
    gateway: GatewayProcess,
    max_tokens: int,
    out: dict[str, Any],
    stop_after: int | None = None,
    key: str | None = None,
) -> None:
    """One streamed chat (with alice's key unless `key` is given); records the status, the
    request id, the events with text it received (`text_events`), when the first arrived
    (`first_text_at`, monotonic) and the last two events. `stop_after` text events, it hangs
    up."""
    body = {
        "model": "demo-llama",
        "stream": True,
        "max_tokens": max_tokens,
        "messages": [{"role": "user", "content": "tell me a long story"}],
    }
    headers = {"authorization": f"Bearer {key or gateway.key('alice')}"}
    events: list[str] = []
    out["text_events"] = 0
    try:
        with httpx.stream(
            "POST", gateway.url + "/v1/chat/completions", json=body, headers=headers, timeout=60
        ) as response:
            out["status"] = response.status_code
            out["id"] = response.headers.get("x-request-id")
            if response.status_code != 200:
                out["body"] = response.read().decode(errors="replace")
            for line in response.iter_lines():
                if not line.startswith("data: "):
                    continue
                events.append(line)
                if '"content":"' in line and '"content":""' not in line:
                    out.setdefault("first_text_at", time.monotonic())
                    out["text_events"] += 1
                    if stop_after is not None and out["text_events"] >= stop_after:
                        break
    except httpx.HTTPError as exc:
        out["error"] = repr(exc)
    out["tail"] = events[-2:]


def start_streams(
    gateway: GatewayProcess,
    lengths: list[int],
    stop_after: list[int | None] | None = None,
    key: str | None = None,
) -> list[tuple[threading.Thread, dict[str, Any]]]:
    streams = []
    for i, n in enumerate(lengths):
        out: dict[str, Any] = {}
        stop = stop_after[i] if stop_after else None
        thread = threading.Thread(target=stream_chat, args=(gateway, n, out, stop, key))
        thread.start()
        streams.append((thread, out))
    return streams


def wait_streaming(
    streams: list[tuple[threading.Thread, dict[str, Any]]], timeout: float = 30
) -> None:
    """Return once every stream has received text; fail naming what each one got instead."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(out.get("text_events", 0) >= 1 for _, out in streams):
            return
        if any(not thread.is_alive() for thread, _ in streams):
            break
        time.sleep(0.05)
    raise AssertionError(f"not all streaming: {[out for _, out in streams]}")


def join(streams: list[tuple[threading.Thread, dict[str, Any]]]) -> list[dict[str, Any]]:
    for thread, _ in streams:
        thread.join(timeout=60)
    return [out for _, out in streams]


def usage_rows(gateway: GatewayProcess) -> dict[str, tuple[str, int, str]]:
    """request id -> (status, completion tokens, error type), from the gateway's database."""
    script = (
        "import json; from tenants.models import UsageRecord; print(json.dumps(list("
        "UsageRecord.objects.values_list('request_id', 'status', 'completion_tokens', "
        "'error_type'))))"
    )
    rows = json.loads(gateway.manage("shell", "-c", script).strip().splitlines()[-1])
    return {r[0]: (r[1], r[2], r[3]) for r in rows}


def rows_when(
    gateway: GatewayProcess,
    fields: tuple[str, ...],
    ready: Callable[[list[list[Any]]], bool],
    timeout: float = 10.0,
) -> list[list[Any]]:
    """Every usage row as [request id, *fields], oldest first, once `ready(rows)` (the writer
    flushes in batches), or as they are after `timeout`."""
    names = ", ".join(repr(f) for f in ("request_id", *fields))
    script = (
        "import json; from tenants.models import UsageRecord; print(json.dumps(list("
        f"UsageRecord.objects.order_by('queued_at').values_list({names}))))"
    )
    deadline = time.monotonic() + timeout
    while True:
        rows = json.loads(gateway.manage("shell", "-c", script).strip().splitlines()[-1])
        if ready(rows) or time.monotonic() > deadline:
            return list(rows)
        time.sleep(0.2)


def endpoints_since(gateway: GatewayProcess, before: set[str], count: int = 1) -> list[str]:
    """The endpoints of the usage rows written since `before` (request ids), oldest first, once
    `count` of them are there."""
    rows = rows_when(
        gateway, ("endpoint",), lambda rows: sum(r[0] not in before for r in rows) >= count
    )
    return [r[1] for r in rows if r[0] not in before]


def usage_field(gateway: GatewayProcess, request_id: str, name: str) -> Any:
    """One field of a request's usage row, once the row is written (None if it never is)."""
    rows = rows_when(gateway, (name,), lambda rows: any(r[0] == request_id for r in rows))
    return next((r[1] for r in rows if r[0] == request_id), None)
