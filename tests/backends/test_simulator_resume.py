"""What the gateway's resume relies on, as vLLM does it: an abort frees the slot at the next
engine step, `continue_final_message` continues the final assistant message (and is refused
where vLLM refuses it), and `/tokenize` counts a chat prompt as a completion would."""

from __future__ import annotations

import json

import httpx

from simulator.engine import Engine, EngineConfig, Sequence
from simulator.protocol import token_text, tokenize

MESSAGES = [{"role": "user", "content": "tell me a story"}]


def answer(first: int, last: int) -> str:
    return "".join(token_text(i) for i in range(first, last + 1))


async def test_an_abort_takes_effect_at_the_next_step_not_at_once() -> None:
    engine = Engine(EngineConfig(max_num_seqs=1, speed=1000.0))
    running = engine.add(Sequence(tokenize("a b c"), max_tokens=50))
    waiting = engine.add(Sequence(tokenize("d e f"), max_tokens=5))
    await engine.step_once()
    engine.abort(running)
    assert engine.num_running == 1 and not running.finished
    await engine.step_once()
    assert running.finish_reason == "abort" and engine.running == [waiting]


async def test_a_continued_message_goes_on_where_the_partial_one_stopped(simulator) -> None:
    sim = simulator()
    partial = answer(1, 7)
    body = {
        "messages": [*MESSAGES, {"role": "assistant", "content": partial}],
        "continue_final_message": True,
        "add_generation_prompt": False,
        "max_tokens": 5,
    }
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{sim.url}/v1/chat/completions", json=body)
    assert response.status_code == 200
    assert partial + response.json()["choices"][0]["message"]["content"] == answer(1, 12)


async def test_continue_final_message_with_the_default_generation_prompt_is_refused(
    simulator,
) -> None:
    sim = simulator()
    body = {
        "messages": [*MESSAGES, {"role": "assistant", "content": "the"}],
        "continue_final_message": True,
        "max_tokens": 5,
    }
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{sim.url}/v1/chat/completions", json=body)
    assert response.status_code == 400
    assert "add_generation_prompt" in response.json()["error"]["message"]


async def test_a_final_message_of_another_role_is_continued_as_vllm_does(simulator) -> None:
    """The real vLLM 0.32 continues a final user message (tests/vllm/test_vllm_sdk.py); the
    simulator refused it until that test showed otherwise."""
    sim = simulator()
    body = {
        "messages": MESSAGES,
        "continue_final_message": True,
        "add_generation_prompt": False,
        "max_tokens": 5,
    }
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{sim.url}/v1/chat/completions", json=body)
    assert response.status_code == 200


async def test_tokenize_counts_a_chat_prompt_as_the_completion_reports_it(simulator) -> None:
    sim = simulator()
    async with httpx.AsyncClient() as client:
        counted = await client.post(
            f"{sim.url}/tokenize", json={"model": "demo-llama", "messages": MESSAGES}
        )
        completion = await client.post(
            f"{sim.url}/v1/chat/completions", json={"messages": MESSAGES, "max_tokens": 1}
        )
    assert counted.status_code == 200
    assert counted.json()["count"] == completion.json()["usage"]["prompt_tokens"]
    assert len(counted.json()["tokens"]) == counted.json()["count"]


async def test_tokenize_refuses_an_unknown_model(simulator) -> None:
    sim = simulator()
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{sim.url}/tokenize", json={"model": "x", "prompt": "hi"})
    assert response.status_code == 404 and json.loads(response.text)["error"]["code"] == 404


async def test_sglang_continues_a_final_assistant_message_whatever_add_generation_prompt_says(
    simulator,
) -> None:
    sim = simulator("--format", "sglang")
    partial = answer(1, 7)
    body = {
        "messages": [*MESSAGES, {"role": "assistant", "content": partial}],
        "continue_final_message": True,
        "max_tokens": 5,
    }
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{sim.url}/v1/chat/completions", json=body)
    assert response.status_code == 200
    assert partial + response.json()["choices"][0]["message"]["content"] == answer(1, 12)


async def test_sglang_answers_a_plain_chat_when_the_final_message_is_not_the_assistants(
    simulator,
) -> None:
    sim = simulator("--format", "sglang")
    body = {"messages": MESSAGES, "continue_final_message": True, "max_tokens": 3}
    async with httpx.AsyncClient() as client:
        response = await client.post(f"{sim.url}/v1/chat/completions", json=body)
    assert response.status_code == 200
    assert response.json()["choices"][0]["message"]["content"] == answer(1, 3)
