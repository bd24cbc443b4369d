"""SSE framing: whole events out, however the upstream splits its bytes."""

from __future__ import annotations

from llmserver.wire.sse import EventSplitter, is_usage_only, usage_of


def test_it_yields_events_only_once_they_are_complete():
    splitter = EventSplitter()
    assert splitter.feed(b'data: {"a"') == []
    assert splitter.feed(b": 1}\n") == []
    assert splitter.feed(b"\ndata: [DONE]\n\n") == [(None, b'{"a": 1}'), (None, b"[DONE]")]


def test_it_reads_crlf_framing_and_ignores_comments():
    assert EventSplitter().feed(b": keep-alive\r\n\r\ndata: x\r\n\r\n") == [(None, b"x")]


def test_it_finds_usage_only_where_it_is():
    payload = b'{"choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 5}}'
    assert usage_of(payload) == {"prompt_tokens": 3, "completion_tokens": 5}
    assert is_usage_only(payload)
    assert usage_of(b'{"choices": [{"delta": {"content": "hi"}}], "usage": null}') is None
