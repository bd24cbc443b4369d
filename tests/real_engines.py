"""Helpers shared by the tests against real engines (llama.cpp's server, vLLM): a gateway
started with `llmserver.testing.processes`, driven from outside as its clients and its
operator would."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Protocol

import httpx
import openai

from llmserver.testing.processes import GatewayProcess


class Engine(Protocol):
    url: str

    def busy(self) -> float: ...


async def wait_idle(engine: Engine, timeout: float = 60.0) -> None:
    """Until the engine holds no request, running or queued."""
    deadline = time.monotonic() + timeout
    while engine.busy():
        assert time.monotonic() < deadline, "the engine never went idle"
        await asyncio.sleep(0.1)


def new_key(gateway: GatewayProcess, user: str, tier: str = "interactive") -> str:
    out = json.loads(gateway.manage("create_api_key", "demo", user, "--tier", tier, "--json"))
    return str(out["key"])


ROW_FIELDS = ("request_id", "status", "prompt_tokens", "completion_tokens")


def usage_rows(
    gateway: GatewayProcess, user: str, fields: tuple[str, ...] = ROW_FIELDS
) -> list[dict[str, object]]:
    """The gateway's usage records for `user`, oldest first, as the database holds them
    (`fields` of each; a cost comes as its decimal string)."""
    out = gateway.manage(
        "shell",
        "-c",
        "import json; from tenants.models import UsageRecord; print(json.dumps(list("
        f"UsageRecord.objects.filter(user={user!r}).order_by('id').values(*{list(fields)!r})"
        "), default=str))",
    )
    return list(json.loads(out.strip().splitlines()[-1]))  # after the shell's banner


def rows_when_written(gateway: GatewayProcess, user: str, count: int) -> list[dict[str, object]]:
    deadline = time.monotonic() + 10
    while len(rows := usage_rows(gateway, user)) < count:
        assert time.monotonic() < deadline, f"{len(rows)} of {count} usage rows written"
        time.sleep(0.2)
    return rows


def sdk(gateway: GatewayProcess, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=gateway.url + "/v1", api_key=key, max_retries=0, timeout=120)


def series(url: str) -> dict[str, float]:
    """Every sample of a Prometheus text page, by its series (name and labels as written)."""
    text = httpx.get(url + "/metrics", timeout=5).text
    pairs = (line.rsplit(" ", 1) for line in text.splitlines() if line and line[0] != "#")
    return {name: float(value) for name, value in pairs}


def check_text_completions_streamed_and_not(gateway: GatewayProcess, model: str) -> None:
    """The `openai` SDK's text completions through the gateway, streamed and not, each billed:
    the whole answer's usage as the engine reported it, the stream's as the gateway asked it."""
    client = sdk(gateway, new_key(gateway, "sdk-text"))
    response = client.completions.create(model=model, prompt="The sky is", max_tokens=8)
    assert response.choices[0].text and response.usage is not None
    assert 0 < response.usage.completion_tokens <= 8
    chunks = list(
        client.completions.create(model=model, prompt="The sea is", max_tokens=8, stream=True)
    )
    assert "".join(c.choices[0].text for c in chunks if c.choices)
    rows = rows_when_written(gateway, "sdk-text", 2)
    assert [r["status"] for r in rows] == ["ok", "ok"]
    assert rows[0]["completion_tokens"] == response.usage.completion_tokens
    assert 0 < int(str(rows[1]["completion_tokens"])) <= 8
