"""What one request depends on: the port a `Completion` (and the Batch API's lines and the
consumers) is given, instead of the process's whole `Gateway`, which implements it.

Each member is one thing a request uses, so the answer to "what may a request touch?" is this
list, and a test builds a request from fakes of it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any, Protocol

from llmserver.backends.upstream import UpstreamClient
from llmserver.cluster.transport import SchedulerTransport
from llmserver.conf import GatewaySettings
from llmserver.pipeline.accounting import UsageRows
from llmserver.runtime.eta import Estimates
from llmserver.runtime.events import RequestEvents
from llmserver.runtime.inflight import InFlight
from llmserver.runtime.keys import KeyInfo
from llmserver.runtime.limits import AdmissionLimits
from llmserver.runtime.pricing import Pricing
from llmserver.wire.validation import CompletionRequest
from tenants.endpoints import Endpoint


class RequestPort(Protocol):
    """All one request may use of the process: the `Gateway` in a server, fakes in a test."""

    @property
    def settings(self) -> GatewaySettings:
        """The process settings (token limits, retention of Responses, the access log)."""
        ...

    @property
    def scheduler(self) -> SchedulerTransport:
        """Where the request is queued, granted a backend, and its account settled."""
        ...

    @property
    def limits(self) -> AdmissionLimits:
        """The rate windows and the quota and budget holds admission takes from."""
        ...

    @property
    def inflight(self) -> InFlight:
        """The completions running in this process (what a drain waits for)."""
        ...

    @property
    def estimates(self) -> Estimates:
        """What requests that ended well taught: wait times and answer lengths."""
        ...

    @property
    def usage(self) -> UsageRows:
        """The ledger's usage rows: one draft per request ending."""
        ...

    def clock(self) -> float:
        """The scheduler's clock, which a queued job's deadline is on."""
        ...

    def pool(self, model: str, endpoint: Endpoint) -> Mapping[str, str] | None:
        """The backends serving `model` on `endpoint` (backend -> its model name); None: no
        route serves the model."""
        ...

    def routes(self) -> Mapping[str, Mapping[str, str]]:
        """Public model name -> {backend: the backend's model name}, as configured now."""
        ...

    def pricing(self, tenant_id: int | None) -> Pricing:
        """The cost policy and prices in force for `tenant_id`."""
        ...

    async def token_blocks(
        self, model: str, kind: str, body: dict[str, Any], request_id: str
    ) -> tuple[int, ...] | None:
        """The prompt's token blocks where its pool routes by the backends' caches, else
        None (it keeps its character blocks)."""
        ...

    def client(self, backend: str) -> UpstreamClient:
        """The upstream client of a configured backend."""
        ...

    def stop_preempting(self, backend: str, why: str) -> None:
        """`backend` refused to continue a paused stream: no more pauses there."""
        ...

    def events(
        self,
        request_id: str,
        key: KeyInfo,
        req: CompletionRequest,
        client_headers: Iterable[tuple[bytes, bytes]],
    ) -> RequestEvents:
        """The request's events, which the metrics and the traces hear."""
        ...
