"""Serving the gateway under daphne with a drain: what `rungateway` runs.

On the first SIGTERM or SIGINT the server stops accepting connections, the gateway refuses new
completions (503 with Retry-After, `/readyz` 503) and lets the streams in flight finish for up to
`drain_seconds`; then each one still running ends with an error event and `[DONE]` (or a 503 if
it had sent nothing yet), its usage is recorded with the tokens delivered, everything pending is
written, and the process exits 0. A second signal exits at once (status 1), without the usage
rows of what was still running: the operator chose speed over the bill.
"""

from __future__ import annotations

import asyncio
import logging
import os
import signal
from types import FrameType
from typing import Any

from daphne.endpoints import build_endpoint_description_strings
from twisted.internet import reactor

from llmserver.conf import GatewaySettings
from llmserver.process import current_gateway
from llmserver.serving.server import GatewayServer

log = logging.getLogger(__name__)


class DrainingServer(GatewayServer):
    """`GatewayServer` (read deadlines, OpenAI-shaped refusals) with the drain above."""

    def __init__(
        self,
        application: Any,
        host: str,
        port: int,
        conf: GatewaySettings,
        fd: int | None = None,
    ) -> None:
        """`fd`: accept on this inherited listening socket (a `--workers` child) instead of
        binding `host`:`port`."""
        if fd is None:
            endpoints = build_endpoint_description_strings(host=host, port=port)
        else:
            endpoints = build_endpoint_description_strings(file_descriptor=fd)
        super().__init__(
            application=application,
            idle_timeout=conf.client_idle_timeout,
            read_timeout=conf.client_read_timeout,
            endpoints=endpoints,
            signal_handlers=False,
            http_timeout=None,
            application_close_timeout=10,
            websocket_handshake_timeout=10,
            server_name="llm-server",
        )
        self.drain_seconds = conf.drain_seconds
        self.ports: list[Any] = []
        self.signals = 0
        self.drain_task: asyncio.Future[None] | None = None

    def listen_success(self, port: Any) -> None:
        self.ports.append(port)
        super().listen_success(port)

    def run(self) -> None:
        reactor.callWhenRunning(self._install_signal_handlers)
        super().run()

    def _install_signal_handlers(self) -> None:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.signals += 1
        if self.signals == 1:
            reactor.callFromThread(self._begin_drain)
            return
        # The operator insists: exit now. Requests still running get no usage row (the drain
        # exists so that this is the exception), hence the warning.
        log.warning("second signal: exiting at once without draining")
        os._exit(1)

    def _begin_drain(self) -> None:
        for port in self.ports:
            port.stopListening()
        self.drain_task = asyncio.ensure_future(self._drain_then_stop())

    async def _drain_then_stop(self) -> None:
        gateway = current_gateway()
        try:
            if gateway is not None:
                log.info("draining: up to %.0f s for the streams in flight", self.drain_seconds)
                await gateway.drain(self.drain_seconds)
        except Exception:
            log.exception("the drain failed; stopping anyway")
        finally:
            self.stop()
