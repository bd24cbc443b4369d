"""A completion runs on fakes of its port (`llmserver/pipeline/port.py`): what one request depends
on is all a test needs to run one, end to end, against a backend on loopback."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web

from llmserver.backends.spec import BackendSpec
from llmserver.backends.upstream import UpstreamClient
from llmserver.batches.lines import KeepingSink
from llmserver.conf import GatewaySettings
from llmserver.pipeline.completion import Completion, new_request_id
from llmserver.runtime.eta import Estimates
from llmserver.runtime.events import RequestEvents
from llmserver.runtime.inflight import InFlight
from llmserver.runtime.keys import KeyInfo
from llmserver.runtime.limits import AdmissionLimits
from llmserver.runtime.pricing import Pricing
from llmserver.runtime.ratelimit import sliding_window
from llmserver.runtime.reservations import reservations
from llmserver.runtime.usage import UsageDraft
from llmserver.wire.errors import ApiError
from llmserver.wire.validation import CompletionRequest, TokenLimits, validate
from scheduling import BackendConfig, SchedulerConfig, SchedulerService, TierPolicy
from tenants.endpoints import Endpoint
from tenants.models import UsageStatus

MODEL = "demo"
ANSWER = {
    "id": "cmpl-upstream",
    "object": "chat.completion",
    "model": "sim-model",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
}
KEY = KeyInfo(
    key_id=1,
    tenant_id=1,
    tenant_slug="acme",
    user="alice",
    tier_id=1,
    tier_name="standard",
    band=1,
    policy=TierPolicy(),
    queue_timeout=30.0,
    model_patterns=(),
    has_quota_rules=False,
    monthly_budget=None,
    over_budget="refuse",
)


class Rows(list[UsageDraft]):
    """The usage rows written, in order."""

    def add(self, draft: UsageDraft) -> None:
        self.append(draft)


class Heard(RequestEvents):
    """The events a request reported, by name, in order."""

    def __init__(self) -> None:
        self.steps: list[str] = []

    def admitting(self) -> None:
        self.steps.append("admitting")

    def queued(self, band: int) -> None:
        self.steps.append("queued")

    def dispatched(
        self,
        backend: str,
        upstream_model: str,
        client: UpstreamClient,
        resumed: bool,
        queue_wait: float | None,
    ) -> Mapping[str, str] | None:
        self.steps.append("dispatched")
        return None

    def first_token(self, seconds: float) -> None:
        self.steps.append("first_token")

    def forwarded(self) -> None:
        self.steps.append("forwarded")

    def settling(self) -> None:
        self.steps.append("settling")

    def finish(self, draft: UsageDraft, model_label: str, seconds: float) -> None:
        self.steps.append("finish")


@dataclass
class FakePort:
    """A `RequestPort` of plain parts: one backend, "sim", serving MODEL; the scheduler in
    process; limits in memory; usage rows kept in a list."""

    upstream: UpstreamClient
    settings: GatewaySettings = field(default_factory=GatewaySettings)
    scheduler: SchedulerService = field(
        default_factory=lambda: SchedulerService(
            SchedulerConfig(), (BackendConfig("sim", frozenset({MODEL}), has_metrics=False),)
        )
    )
    limits: AdmissionLimits = field(
        default_factory=lambda: AdmissionLimits(sliding_window("", "t:"), reservations("", "t:"))
    )
    inflight: InFlight = field(default_factory=InFlight)
    estimates: Estimates = field(default_factory=Estimates)
    usage: Rows = field(default_factory=Rows)
    heard: Heard = field(default_factory=Heard)

    def clock(self) -> float:
        return time.monotonic()

    def pool(self, model: str, endpoint: Endpoint) -> Mapping[str, str] | None:
        return self.routes().get(model)

    def routes(self) -> Mapping[str, Mapping[str, str]]:
        return {MODEL: {"sim": "sim-model"}}

    def pricing(self, tenant_id: int | None) -> Pricing:
        return Pricing()

    async def token_blocks(
        self, model: str, kind: str, body: dict[str, Any], request_id: str
    ) -> tuple[int, ...] | None:
        return None

    def client(self, backend: str) -> UpstreamClient:
        return self.upstream

    def stop_preempting(self, backend: str, why: str) -> None:
        raise AssertionError("a whole answer is never paused")

    def events(
        self,
        request_id: str,
        key: KeyInfo,
        req: CompletionRequest,
        client_headers: Iterable[tuple[bytes, bytes]],
    ) -> RequestEvents:
        return self.heard


@pytest.fixture
async def port() -> AsyncIterator[FakePort]:
    """The port, its backend a loopback server answering every chat with ANSWER."""

    async def answer(request: web.Request) -> web.Response:
        return web.json_response(ANSWER)

    app = web.Application()
    app.router.add_post("/v1/chat/completions", answer)
    runner = web.AppRunner(app)
    await runner.setup()
    await web.TCPSite(runner, "127.0.0.1", 0).start()
    client = UpstreamClient(
        BackendSpec("sim", "vllm", f"http://127.0.0.1:{runner.addresses[0][1]}")
    )
    yield FakePort(client)
    await client.aclose()
    await runner.cleanup()


def chat(model: str = MODEL) -> CompletionRequest:
    body = {"model": model, "max_tokens": 8, "messages": [{"role": "user", "content": "hello"}]}
    return validate(Endpoint.CHAT, body, TokenLimits(16, 64, None))


async def test_a_completion_runs_on_fakes_of_its_port(port: FakePort) -> None:
    sink = KeepingSink()
    await Completion(port, KEY, chat(), sink, new_request_id()).run()

    assert sink.status == 200
    assert sink.json()["choices"][0]["message"]["content"] == "hi"
    [row] = port.usage
    assert (row.status, row.backend) == (UsageStatus.OK, "sim")
    assert (row.prompt_tokens, row.completion_tokens) == (7, 3)


async def test_each_step_of_a_served_request_is_reported_once(port: FakePort) -> None:
    await Completion(port, KEY, chat(), KeepingSink(), new_request_id()).run()

    assert port.heard.steps == [
        "admitting",
        "queued",
        "dispatched",
        "first_token",
        "forwarded",
        "settling",
        "finish",
    ]


async def test_a_refused_request_reports_its_ending_once_and_bills_nothing(
    port: FakePort,
) -> None:
    with pytest.raises(ApiError):
        await Completion(
            port, KEY, chat("nobody-serves-this"), KeepingSink(), new_request_id()
        ).run()

    assert port.heard.steps == ["admitting", "settling", "finish"]
    [row] = port.usage
    assert (row.status, row.error_type, row.model) == (
        UsageStatus.REJECTED,
        "model_not_found",
        "unknown",
    )
    assert (row.prompt_tokens, row.completion_tokens) == (0, 0)
