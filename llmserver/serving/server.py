# Twisted's HTTPChannel is partly annotated (untyped methods, interface-typed attributes that
# mypy cannot call): this adapter module is checked without those two complaints.
# mypy: disable-error-code="no-untyped-call,misc"
"""The daphne server `rungateway` runs, with the bounds daphne leaves to Twisted set for a gateway.

Daphne hands the application a request only once Twisted has read all of it, so a slow client
never reaches our code: Twisted's only guard is an idle timeout (60 s, reset by every byte), and
a client that sends one header byte a minute holds a connection forever. This server adds:

1. a read deadline: from a request's first byte, its request line, headers and body must all
   arrive within `client_read_timeout` seconds, or the client gets 408 and the connection closes;
2. the idle timeout as a setting (`client_idle_timeout`);
3. Twisted's bare `400 Bad Request` (too many or too large headers, a malformed request line)
   answered with OpenAI's error body, and 431 where the headers were too large;
4. form bodies (multipart, url-encoded) left to the application, which answers 415, instead of
   Twisted parsing them into memory and closing on a parse error.
"""

from __future__ import annotations

import json
from typing import Any

from daphne.http_protocol import HTTPFactory, WebRequest
from daphne.server import Server
from twisted.internet import reactor as _reactor
from twisted.web import http

from tenants.api.error_shape import error_body

LINGER_SECONDS = 2.0
reactor: Any = _reactor  # the global reactor module object is typed as a module, not a reactor


def raw_error(status: int, reason: str, message: str, code: str) -> bytes:
    """A complete HTTP/1.1 error response in OpenAI's shape, ending the connection."""
    body = json.dumps(error_body(message, "invalid_request_error", None, code)).encode()
    head = (
        f"HTTP/1.1 {status} {reason}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode() + body


class GatewayRequest(WebRequest):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs["parsePOSTFormSubmission"] = False
        super().__init__(*args, **kwargs)


class GatewayChannel(http.HTTPChannel):
    """Twisted's HTTP channel with a whole-request read deadline and OpenAI-shaped refusals."""

    read_timeout: float | None = None
    _read_deadline: Any = None

    def dataReceived(self, data: bytes) -> None:
        if self._read_deadline is None and not self._handlingRequest and self.read_timeout:
            self._read_deadline = reactor.callLater(self.read_timeout, self._read_too_slow)
        super().dataReceived(data)

    def allContentReceived(self) -> None:
        self._cancel_read_deadline()
        super().allContentReceived()

    def connectionLost(self, reason: Any = None) -> None:
        self._cancel_read_deadline()
        super().connectionLost(reason)

    def _cancel_read_deadline(self) -> None:
        if self._read_deadline is not None and self._read_deadline.active():
            self._read_deadline.cancel()
        self._read_deadline = None

    def _read_too_slow(self) -> None:
        message = f"The request did not arrive within {self.read_timeout:g} s."
        self._reply(raw_error(408, "Request Timeout", message, "request_timeout"))

    def _respondToBadRequestAndDisconnect(self) -> None:
        if (
            self._receivedHeaderSize > self.totalHeadersSize
            or self._receivedHeaderCount > self.maxHeaders
        ):
            self._refuse_large_headers()
        else:
            message = "The HTTP request is malformed."
            self._reply(raw_error(400, "Bad Request", message, "bad_request"))

    def lineLengthExceeded(self, line: bytes) -> None:
        """One line longer than `MAX_LENGTH`: Twisted would drop the connection without a word."""
        self._refuse_large_headers()

    def _refuse_large_headers(self) -> None:
        message = (
            f"Send at most {self.maxHeaders} headers, {self.totalHeadersSize} bytes in all "
            f"and {self.MAX_LENGTH} bytes a line."
        )
        reply = raw_error(431, "Request Header Fields Too Large", message, "headers_too_large")
        self._reply(reply)

    def _reply(self, response: bytes) -> None:
        """Send the refusal and close as nginx does, lingering: closing at once with the rest
        of the client's request unread makes the kernel send a reset, which can destroy the
        response before the client reads it. So: half-close, discard what still comes, and
        drop the connection after `LINGER_SECONDS`."""
        self._cancel_read_deadline()
        transport: Any = self.transport
        transport.write(response)
        self.dataReceived = lambda data: None  # type: ignore[method-assign]
        transport.loseWriteConnection()
        reactor.callLater(LINGER_SECONDS, transport.loseConnection)


class GatewayHTTPFactory(HTTPFactory):
    def __init__(self, server: Server, idle_timeout: float, read_timeout: float) -> None:
        super().__init__(server)
        self.timeOut = idle_timeout
        self.read_timeout = read_timeout

    def protocol(self) -> Any:
        channel = GatewayChannel()
        channel.read_timeout = self.read_timeout
        # Twisted's own wrapper picks HTTP/1.1 or HTTP/2 around the channel.
        return http._GenericHTTPChannelProtocol(channel)

    def buildProtocol(self, addr: Any) -> Any:
        protocol = super().buildProtocol(addr)
        protocol.requestFactory = GatewayRequest
        return protocol

    def log(self, request: Any) -> None:
        """No Twisted access line: at the verbosity `rungateway` serves with, daphne sends
        Twisted's log to an observer that discards it, after Twisted formatted a combined-log
        line for every request (about 3% of the gateway's CPU). The gateway's own access log is
        `llmserver.access`."""


class GatewayServer(Server):
    """daphne's Server with `GatewayHTTPFactory`. Server.run() builds its factory inline, so the
    attribute it assigns is intercepted here rather than copying run()."""

    def __init__(self, *args: Any, idle_timeout: float, read_timeout: float, **kwargs: Any) -> None:
        self._idle_timeout, self._read_timeout = idle_timeout, read_timeout
        super().__init__(*args, **kwargs)

    @property
    def http_factory(self) -> GatewayHTTPFactory:
        return self._http_factory

    @http_factory.setter
    def http_factory(self, _daphne_factory: HTTPFactory) -> None:
        self._http_factory = GatewayHTTPFactory(self, self._idle_timeout, self._read_timeout)
