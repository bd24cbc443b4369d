"""Through `rungateway`'s server: slow clients are cut off, and what Twisted refuses before our
code is still answered in OpenAI's shape."""

from __future__ import annotations

import contextlib
import json
import socket
import time
from collections.abc import Iterator
from urllib.parse import urlsplit

import pytest

from llmserver.testing.processes import Database, GatewayProcess, start_gateway

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def served(e2e_simulator, tmp_path_factory) -> Iterator[GatewayProcess]:
    database = Database(tmp_path_factory.mktemp("slow"))
    gateway = start_gateway(
        database.url,
        e2e_simulator.url,
        {"CLIENT_READ_TIMEOUT": "1", "CLIENT_IDLE_TIMEOUT": "30"},
        quiet=True,
        rungateway=True,
    )
    yield gateway
    gateway.stop()
    database.drop()


def connect(gateway: GatewayProcess) -> socket.socket:
    url = urlsplit(gateway.url)
    sock = socket.create_connection((url.hostname, url.port), timeout=10)
    return sock


def read_response(sock: socket.socket) -> tuple[int, dict[str, str], bytes]:
    data = b""
    while chunk := sock.recv(65536):
        data += chunk
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = dict(line.lower().split(": ", 1) for line in lines[1:])
    return int(lines[0].split()[1]), headers, body


def test_a_client_that_sends_its_headers_slowly_gets_408_at_the_read_deadline(served):
    sock = connect(served)
    started = time.monotonic()
    try:
        for byte in b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 100:
            sock.sendall(bytes([byte]))
            time.sleep(0.1)  # every byte resets Twisted's idle timeout; the deadline holds
            if time.monotonic() - started > 5:
                break
    except (BrokenPipeError, ConnectionResetError):
        pass
    status, _, body = read_response(sock)
    assert status == 408 and json.loads(body)["error"]["code"] == "request_timeout"
    assert time.monotonic() - started < 4


def test_a_64_kb_header_gets_431_in_openai_shape(served):
    sock = connect(served)
    # The server may stop reading once it has refused.
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        sock.sendall(b"GET /v1/models HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 65536 + b"\r\n\r\n")
    status, _, body = read_response(sock)
    assert status == 431 and json.loads(body)["error"]["code"] == "headers_too_large"


def test_a_multipart_body_reaches_the_gateway_and_gets_415(served):
    body = b'{"model": "demo-llama"}'  # labelled multipart, which Twisted fails to parse
    sock = connect(served)
    sock.sendall(
        b"POST /v1/chat/completions HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Authorization: Bearer " + served.key("alice").encode() + b"\r\n"
        b"Content-Type: multipart/form-data; boundary=xyz\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
    )
    status, _, raw = read_response(sock)
    assert status == 415 and json.loads(raw)["error"]["code"] == "unsupported_media_type"


def test_head_on_a_v1_endpoint_gets_200_and_no_body(served):
    sock = connect(served)
    sock.sendall(
        b"HEAD /v1/models HTTP/1.1\r\nHost: x\r\nConnection: close\r\n"
        b"Authorization: Bearer " + served.key("alice").encode() + b"\r\n\r\n"
    )
    status, headers, body = read_response(sock)
    assert (status, body, headers["content-type"]) == (200, b"", "application/json")
