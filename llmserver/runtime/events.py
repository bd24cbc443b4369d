"""A request's events: each step of one completion, reported once by the pipeline and heard by
every listener (the metrics, `llmserver/runtime/request_metrics.py`; the span writer,
`llmserver/runtime/otel.py`), so a step is never reported twice in two vocabularies.

The steps, in order: admitting, queued, then per upstream request dispatched, first token (the
first only), preempted or upstream failed, forwarded; then settling and finish, exactly once.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from llmserver.backends.upstream import UpstreamClient
    from llmserver.runtime.usage import UsageDraft


class RequestEvents:
    """One request's steps. This base hears nothing: a listener overrides the steps it
    records."""

    def admitting(self) -> None:
        """Admission begins: rate windows, the route, budgets and quota, the prompt's keys."""

    def queued(self, band: int) -> None:
        """Admitted in `band` and queued: the wait for a slot begins."""

    def dispatched(
        self,
        backend: str,
        upstream_model: str,
        client: UpstreamClient,
        resumed: bool,
        queue_wait: float | None,
    ) -> Mapping[str, str] | None:
        """One upstream request to `backend` begins (`resumed`: it continues a stream the
        client has begun; `queue_wait`: seconds from arrival, on the request's first dispatch
        only). Returns the headers that carry the trace to the engine (None: none)."""
        return None

    def first_token(self, seconds: float) -> None:
        """The first token went to the client, `seconds` after the request arrived."""

    def preempted(self, kind: str) -> None:
        """The scheduler took this upstream request's slot (`kind`: before the first token, or
        a stream that will be resumed)."""

    def upstream_failed(self, kind: str, message: str) -> None:
        """This upstream request failed (`kind`: "transport" or "http_5xx" and so on)."""

    def forwarded(self) -> None:
        """The upstream request ended, however it ended."""

    def settling(self) -> None:
        """Accounting begins: the slot, the fair-share account, the usage row."""

    def finish(self, draft: UsageDraft, model_label: str, seconds: float) -> None:
        """The request's one ending, `seconds` after it arrived: its status and the tokens
        billed; `model_label` is its model if configured, else "unknown"."""


class Broadcast(RequestEvents):
    """Each event to every listener, in order; the trace headers of the first that gives any."""

    def __init__(self, *listeners: RequestEvents) -> None:
        self.listeners = listeners

    def admitting(self) -> None:
        for listener in self.listeners:
            listener.admitting()

    def queued(self, band: int) -> None:
        for listener in self.listeners:
            listener.queued(band)

    def dispatched(
        self,
        backend: str,
        upstream_model: str,
        client: UpstreamClient,
        resumed: bool,
        queue_wait: float | None,
    ) -> Mapping[str, str] | None:
        headers: Mapping[str, str] | None = None
        for listener in self.listeners:
            given = listener.dispatched(backend, upstream_model, client, resumed, queue_wait)
            headers = headers if headers is not None else given
        return headers

    def first_token(self, seconds: float) -> None:
        for listener in self.listeners:
            listener.first_token(seconds)

    def preempted(self, kind: str) -> None:
        for listener in self.listeners:
            listener.preempted(kind)

    def upstream_failed(self, kind: str, message: str) -> None:
        for listener in self.listeners:
            listener.upstream_failed(kind, message)

    def forwarded(self) -> None:
        for listener in self.listeners:
            listener.forwarded()

    def settling(self) -> None:
        for listener in self.listeners:
            listener.settling()

    def finish(self, draft: UsageDraft, model_label: str, seconds: float) -> None:
        for listener in self.listeners:
            listener.finish(draft, model_label, seconds)
