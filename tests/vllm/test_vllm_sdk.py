"""The official `openai` SDK through the gateway to the real vLLM: every surface, billed what
the engine itself counted."""

from __future__ import annotations

import httpx
import pytest

from llmserver.testing.vllm_server import SERVED_NAME
from tests.real_engines import (
    check_text_completions_streamed_and_not,
    new_key,
    rows_when_written,
    sdk,
)
from tests.vllm.conftest import MODEL

pytestmark = pytest.mark.vllm
MESSAGES = [{"role": "user", "content": "Name three colours."}]


def engine_counts(vllm) -> tuple[float, float]:
    """(prompt tokens, generated tokens) the engine has counted since it started."""
    values = vllm.metrics()
    return values["vllm:prompt_tokens_total"], values["vllm:generation_tokens_total"]


def test_a_non_streaming_chat_is_billed_what_the_engine_counted(gateway, vllm):
    client = sdk(gateway, new_key(gateway, "sdk-chat"))
    before = engine_counts(vllm)
    response = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=12)
    after = engine_counts(vllm)
    assert response.choices[0].message.content and response.model == MODEL
    usage = response.usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        after[0] - before[0],
        after[1] - before[1],
    )
    (row,) = rows_when_written(gateway, "sdk-chat", 1)
    assert (row["status"], row["prompt_tokens"], row["completion_tokens"]) == (
        "ok",
        usage.prompt_tokens,
        usage.completion_tokens,
    )


def test_a_streaming_chat_is_billed_the_engines_final_usage(gateway, vllm):
    client = sdk(gateway, new_key(gateway, "sdk-stream"))
    before = engine_counts(vllm)
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=16,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    after = engine_counts(vllm)
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text and len({c.id for c in chunks}) == 1
    usage = chunks[-1].usage
    assert usage is not None
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        after[0] - before[0],
        after[1] - before[1],
    )
    (row,) = rows_when_written(gateway, "sdk-stream", 1)
    assert (row["status"], row["prompt_tokens"], row["completion_tokens"]) == (
        "ok",
        usage.prompt_tokens,
        usage.completion_tokens,
    )


def test_a_stream_without_usage_asked_is_still_billed_exactly(gateway, vllm):
    """The client did not ask for usage; the gateway asks the engine for it and keeps it from
    the client."""
    client = sdk(gateway, new_key(gateway, "sdk-no-usage"))
    before = engine_counts(vllm)
    chunks = list(
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=10, stream=True)
    )
    after = engine_counts(vllm)
    assert all(c.usage is None for c in chunks)
    (row,) = rows_when_written(gateway, "sdk-no-usage", 1)
    assert (row["prompt_tokens"], row["completion_tokens"]) == (
        after[0] - before[0],
        after[1] - before[1],
    )


def test_text_completions_work_streaming_and_not(gateway, vllm):
    check_text_completions_streamed_and_not(gateway, MODEL)


def test_the_engine_accepts_and_ignores_priority_under_fcfs(vllm):
    """vLLM 0.32 on CPU answers `priority` under its default fcfs policy with a 200 (its field's
    description still says it errors): the gateway's simulator and priority handling must
    take both answers."""
    body = {
        "model": SERVED_NAME,
        "messages": MESSAGES,
        "max_tokens": 2,
        "priority": 1,
    }
    assert httpx.post(vllm.url + "/v1/chat/completions", json=body, timeout=60).status_code == 200


def test_a_backend_marked_priority_scheduling_on_an_fcfs_engine_still_serves(vllm, tmp_path):
    from tests.vllm.conftest import gateway_for

    gateway = gateway_for(vllm, tmp_path, "--priority-scheduling")
    try:
        client = sdk(gateway, new_key(gateway, "prio-fcfs"))
        response = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4)
        assert response.choices[0].message.content
    finally:
        gateway.stop()
        gateway.database.drop()  # type: ignore[attr-defined]


def chat_direct(vllm, **body: object) -> httpx.Response:
    data = {"model": SERVED_NAME, "max_tokens": 2, **body}
    return httpx.post(vllm.url + "/v1/chat/completions", json=data, timeout=60)


def test_the_engine_refuses_a_continuation_that_also_asks_for_a_generation_prompt(vllm):
    """docs/BACKENDS.md: `continue_final_message` with `add_generation_prompt` (true by
    default) is a 400; the gateway sends both fields set as the engine requires. A final
    message of another role is continued too (the simulator followed: it refused it)."""
    partial = [*MESSAGES, {"role": "assistant", "content": "Red,"}]
    assert chat_direct(vllm, messages=partial, continue_final_message=True).status_code == 400
    last_is_user = chat_direct(
        vllm, messages=MESSAGES, continue_final_message=True, add_generation_prompt=False
    )
    assert last_is_user.status_code == 200
    continued = chat_direct(
        vllm, messages=partial, continue_final_message=True, add_generation_prompt=False
    )
    assert continued.status_code == 200


def test_the_engine_counts_a_chats_prompt_on_tokenize_as_its_completion_does(vllm):
    """docs/BACKENDS.md: a resumed stream's original prompt is counted on vLLM's /tokenize."""
    counted = httpx.post(
        vllm.url + "/tokenize",
        json={"model": SERVED_NAME, "messages": MESSAGES, "add_generation_prompt": True},
        timeout=60,
    ).json()["count"]
    assert chat_direct(vllm, messages=MESSAGES).json()["usage"]["prompt_tokens"] == counted


def test_the_engine_answers_a_scrape_in_the_prometheus_text_format(vllm):
    """docs/BACKENDS.md: scrapes send `Accept: text/plain` and get the text format (vLLM 0.32
    answers it even to a scraper asking for OpenMetrics)."""
    for accept in ("text/plain", "application/openmetrics-text; version=1.0.0"):
        answer = httpx.get(vllm.url + "/metrics", headers={"accept": accept}, timeout=10)
        assert answer.headers["content-type"].startswith("text/plain")
        assert "# EOF" not in answer.text
