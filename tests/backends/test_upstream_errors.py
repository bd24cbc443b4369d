"""How a backend's refusal is read: its own message, in whichever shape its server writes it."""

from __future__ import annotations

import pytest

from llmserver.backends.upstream import _error_from_response


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (b'{"error": {"message": "bad prompt", "code": 400}}', "bad prompt"),  # vLLM, OpenAI
        (
            b'{"error": "Input validation error", "error_type": "validation"}',
            "Input validation error",
        ),
        (b'{"message": "too long"}', "too long"),
    ],
    ids=["openai", "tgi", "plain"],
)
def test_a_backends_own_message_is_kept(raw: bytes, message: str) -> None:
    assert _error_from_response(400, raw).message == message


def test_a_route_the_server_lacks_says_so() -> None:
    error = _error_from_response(404, b'{"detail": "Not Found"}')
    assert error.message == "The backend answered 404 Not Found: it does not serve this endpoint"
    assert not error.retryable


def test_a_body_that_is_not_json_names_the_status() -> None:
    assert _error_from_response(502, b"<html>Bad Gateway</html>").message == "upstream answered 502"
