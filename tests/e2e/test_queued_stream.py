"""A queued stream through a real daphne: a raw client sees the `: queued` comment lines, and the
official `openai` SDK, which skips them, still parses the stream."""

from __future__ import annotations

import threading

import httpx
import openai
import pytest

from tests.e2e.clients import join, start_streams, wait_streaming

pytestmark = pytest.mark.e2e
MODEL = "demo-llama"


def test_a_queued_stream_shows_its_place_to_a_raw_client_and_the_sdk_still_parses_it(e2e_gateway):
    # alice's tier runs 4 at a time: four long streams hold her slots, the next ones queue.
    holders = start_streams(e2e_gateway, [4000] * 4)
    wait_streaming(holders)
    raw_lines: list[str] = []

    def raw() -> None:
        body = {
            "model": MODEL,
            "stream": True,
            "max_tokens": 3,
            "messages": [{"role": "user", "content": "hi"}],
        }
        headers = {"authorization": f"Bearer {e2e_gateway.key('alice')}"}
        with httpx.stream(
            "POST", e2e_gateway.url + "/v1/chat/completions", json=body, headers=headers, timeout=60
        ) as response:
            raw_lines.extend(line for line in response.iter_lines() if line)

    raw_thread = threading.Thread(target=raw)
    raw_thread.start()
    with openai.OpenAI(
        base_url=e2e_gateway.url + "/v1", api_key=e2e_gateway.key("alice"), max_retries=0
    ) as client:
        stream = client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=4, stream=True
        )
        chunks = list(stream)
    raw_thread.join(60)
    join(holders)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and len({c.id for c in chunks}) == 1
    assert any(line.startswith(": queued position=") for line in raw_lines)
    first_data = next(i for i, line in enumerate(raw_lines) if line.startswith("data: "))
    assert raw_lines[0].startswith(": queued") and first_data > 0
    assert raw_lines[-1] == "data: [DONE]"
