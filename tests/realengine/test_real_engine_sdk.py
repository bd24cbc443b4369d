"""The official `openai` SDK through the gateway to llama-server: every surface, billed exactly."""

from __future__ import annotations

import time

import openai
import pytest

from tests.real_engines import (
    check_text_completions_streamed_and_not,
    new_key,
    rows_when_written,
    sdk,
)
from tests.realengine.conftest import MODEL

pytestmark = pytest.mark.realengine
MESSAGES = [{"role": "user", "content": "Name three colours."}]


def test_a_non_streaming_chat_is_billed_what_the_engine_counted(gateway):
    client = sdk(gateway, new_key(gateway, "sdk-chat"))
    response = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=12)
    assert response.choices[0].message.content and response.model == MODEL
    # llama-server's own count of what it decoded, beside the OpenAI usage block.
    timings = response.model_extra["timings"]
    assert response.usage.completion_tokens == timings["predicted_n"] <= 12
    (row,) = rows_when_written(gateway, "sdk-chat", 1)
    assert row["status"] == "ok"
    assert (row["prompt_tokens"], row["completion_tokens"]) == (
        response.usage.prompt_tokens,
        response.usage.completion_tokens,
    )


def test_a_streaming_chat_arrives_in_chunks_and_is_billed_the_engines_final_usage(gateway):
    client = sdk(gateway, new_key(gateway, "sdk-stream"))
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=16,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and len([c for c in chunks if c.choices]) > 3
    usage = chunks[-1].usage
    assert usage is not None and 0 < usage.completion_tokens <= 16
    (row,) = rows_when_written(gateway, "sdk-stream", 1)
    assert (row["status"], row["prompt_tokens"], row["completion_tokens"]) == (
        "ok",
        usage.prompt_tokens,
        usage.completion_tokens,
    )


def test_text_completions_work_streaming_and_not(gateway):
    check_text_completions_streamed_and_not(gateway, MODEL)


def test_a_revoked_key_is_refused(gateway):
    client = sdk(gateway, new_key(gateway, "sdk-revoked"))
    client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)
    gateway.manage(
        "shell",
        "-c",
        "from tenants.models import ApiKey; ApiKey.objects.filter(user='sdk-revoked')"
        ".update(revoked=True)",
    )
    deadline = time.monotonic() + 10
    while True:  # the gateway's key cache lets a revocation in within KEY_CACHE_SECONDS
        try:
            client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)
        except openai.AuthenticationError:
            break
        assert time.monotonic() < deadline, "the revoked key still works"
        time.sleep(0.2)
