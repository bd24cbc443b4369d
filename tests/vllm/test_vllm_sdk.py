"""The official `openai` SDK through the gateway to the real vLLM: every surface, billed what
the engine itself counted; and the engine's own answers that docs/BACKENDS.md relies on."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from llmserver.testing.vllm_server import SERVED_NAME
from tenants.backend_kinds import PROFILES
from tests.real_engines import (
    new_key,
    rows_when_written,
    sdk,
)
from tests.vllm.conftest import MODEL, SLOTS

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


def test_a_text_completion_is_billed_what_the_engine_counted(gateway, vllm):
    client = sdk(gateway, new_key(gateway, "sdk-text"))
    before = engine_counts(vllm)
    response = client.completions.create(model=MODEL, prompt="The sky is", max_tokens=8)
    after = engine_counts(vllm)
    assert response.choices[0].text and response.usage is not None
    usage = response.usage
    assert (usage.prompt_tokens, usage.completion_tokens) == (
        after[0] - before[0],
        after[1] - before[1],
    )
    (row,) = rows_when_written(gateway, "sdk-text", 1)
    assert (row["status"], row["prompt_tokens"], row["completion_tokens"]) == (
        "ok",
        usage.prompt_tokens,
        usage.completion_tokens,
    )


def test_a_streamed_text_completion_is_billed_what_the_engine_counted(gateway, vllm):
    """The client did not ask for usage; the gateway asks the engine for it."""
    client = sdk(gateway, new_key(gateway, "sdk-text-stream"))
    before = engine_counts(vllm)
    chunks = list(
        client.completions.create(model=MODEL, prompt="The sea is", max_tokens=8, stream=True)
    )
    after = engine_counts(vllm)
    assert "".join(c.choices[0].text for c in chunks if c.choices)
    (row,) = rows_when_written(gateway, "sdk-text-stream", 1)
    assert (row["status"], row["prompt_tokens"], row["completion_tokens"]) == (
        "ok",
        after[0] - before[0],
        after[1] - before[1],
    )


def test_a_text_completion_without_max_tokens_gets_16(vllm):
    """docs/BACKENDS.md (the simulator): OpenAI's default, `CompletionRequest.max_tokens = 16`."""
    body = {"model": SERVED_NAME, "prompt": "The sky is", "ignore_eos": True}
    answer = httpx.post(vllm.url + "/v1/completions", json=body, timeout=60).json()
    assert answer["usage"]["completion_tokens"] == 16
    assert answer["choices"][0]["finish_reason"] == "length"


async def finished_in_order(vllm, requests: dict[str, dict[str, object]]) -> list[str]:
    """Every slot busy (the first blocker ends well before the others), then each of
    `requests` sent once the one before waits in the engine's queue: their names as they
    finished."""
    blockers = [60, 120, 120, 120]
    assert len(blockers) == SLOTS
    order: list[str] = []
    async with httpx.AsyncClient(base_url=vllm.url, timeout=120) as http:

        async def chat(name: str, max_tokens: int, **extra: object) -> None:
            body = {
                "model": SERVED_NAME,
                "messages": MESSAGES,
                "max_tokens": max_tokens,
                "ignore_eos": True,
                **extra,
            }
            (await http.post("/v1/chat/completions", json=body)).raise_for_status()
            order.append(name)

        async def until(name: str, value: int) -> None:
            for _ in range(300):
                if vllm.metrics()[name] == value:
                    return
                await asyncio.sleep(0.02)
            raise AssertionError(f"{name} never reached {value}")

        tasks = [asyncio.create_task(chat(f"blocker{i}", n)) for i, n in enumerate(blockers)]
        await until("vllm:num_requests_running", SLOTS)
        for waiting, (name, extra) in enumerate(requests.items(), start=1):
            tasks.append(asyncio.create_task(chat(name, 4, **extra)))
            await until("vllm:num_requests_waiting", waiting)
        await asyncio.gather(*tasks)
    return [name for name in order if name in requests]


async def test_the_engine_ignores_a_priority_under_fcfs(vllm):
    """vLLM 0.32 (the V1 engine) answers `priority` under its default fcfs policy with a 200 and
    queues by arrival alone (its field's description still says it errors): a request sent
    first with priority 2 runs before one sent after it with priority 0, which the priority
    policy would have run first. The gateway handles this and the V0 engine's 400."""
    order = await finished_in_order(vllm, {"first": {"priority": 2}, "second": {"priority": 0}})
    assert order == ["first", "second"]


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


def test_the_engine_exports_the_metric_names_the_gateway_reads_first(vllm):
    """docs/BACKENDS.md's table: the first of each field's names is what vLLM 0.32 exports (the
    simulator's defaults follow); the older `time_per_output_token_seconds` and
    `gpu_cache_usage_perc` are gone, read only as fallbacks."""
    exported = set(vllm.metrics())
    names = PROFILES["vllm"].metrics
    assert names is not None
    for gauge in (names.waiting[0], names.running[0], names.kv_usage[0]):
        assert gauge in exported
    for histogram in (names.tpot[0], names.ttft[0]):
        assert {f"{histogram}_sum", f"{histogram}_count"} <= exported
    assert {"vllm:prompt_tokens_total", "vllm:generation_tokens_total"} <= exported
    gone = ("vllm:time_per_output_token_seconds", "vllm:gpu_cache_usage_perc")
    assert not [name for name in exported if name.startswith(gone)]


def test_the_engines_error_body_is_openais_shape_with_an_integer_code(vllm):
    """docs/BACKENDS.md, "Errors": a refusal the gateway passes on keeps vLLM's body."""
    partial = [*MESSAGES, {"role": "assistant", "content": "Red,"}]
    refused = chat_direct(vllm, messages=partial, continue_final_message=True)
    error = refused.json()["error"]
    assert set(error) == {"message", "type", "param", "code"}
    assert error["code"] == 400 and isinstance(error["code"], int)
    assert error["type"] == "BadRequestError" and error["message"]
