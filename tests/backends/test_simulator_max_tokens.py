"""Output length as vLLM 0.32 decides it: without `max_tokens` a chat may use the rest of the
context and a text completion gets 16; the context (`--max-model-len`) refuses a larger
`max_tokens` or a longer prompt and cuts a given `max_tokens` to fit; the simulator's model ends
an unlimited answer on its own after 20 to 200 tokens, and a given `max_tokens` is still run to
(see simulator/protocol.py)."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from simulator.launcher import RunningSimulator, start_simulator
from simulator.protocol import chat_prompt, natural_length, tokenize


def chat(content: str, **extra: object) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": content}], **extra}


def prompt_tokens(content: str) -> list[str]:
    return tokenize(chat_prompt([{"role": "user", "content": content}]))


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    with start_simulator(speed=50) as running:
        yield running


async def post(sim: RunningSimulator, path: str, body: dict[str, object]) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(f"{sim.url}{path}", json=body)


async def test_a_chat_without_max_tokens_ends_on_its_own_with_stop(sim) -> None:
    body = (await post(sim, "/v1/chat/completions", chat("tell me about queues"))).json()
    tokens = body["usage"]["completion_tokens"]
    assert body["choices"][0]["finish_reason"] == "stop"
    assert tokens == natural_length(prompt_tokens("tell me about queues"))
    assert 20 <= tokens <= 200


async def test_the_answers_length_is_fixed_by_the_prompt(sim) -> None:
    first = (await post(sim, "/v1/chat/completions", chat("same question"))).json()
    again = (await post(sim, "/v1/chat/completions", chat("same question"))).json()
    assert first["usage"] == again["usage"]
    assert first["choices"][0]["message"] == again["choices"][0]["message"]


async def test_a_given_max_tokens_above_the_natural_length_is_still_run_to(sim) -> None:
    body = (await post(sim, "/v1/chat/completions", chat("hi", max_tokens=300))).json()
    assert body["usage"]["completion_tokens"] == 300
    assert body["choices"][0]["finish_reason"] == "length"


async def test_max_tokens_below_the_natural_length_finishes_with_length(sim) -> None:
    body = (await post(sim, "/v1/chat/completions", chat("hi", max_tokens=3))).json()
    assert body["usage"]["completion_tokens"] == 3
    assert body["choices"][0]["finish_reason"] == "length"


async def test_a_text_completion_without_max_tokens_gets_openais_16(sim) -> None:
    body = (await post(sim, "/v1/completions", {"prompt": "once upon a time"})).json()
    assert body["usage"]["completion_tokens"] == 16
    assert body["choices"][0]["finish_reason"] == "length"


async def test_max_tokens_zero_is_refused_with_vllms_message(sim) -> None:
    response = await post(sim, "/v1/chat/completions", chat("hi", max_tokens=0))
    assert response.status_code == 400
    assert response.json()["error"] == {
        "message": "max_tokens must be at least 1, got 0. (parameter=max_tokens, value=0)",
        "type": "BadRequestError",
        "param": "max_tokens",
        "code": 400,
    }


async def test_a_non_integer_max_tokens_is_a_validation_error(sim) -> None:
    response = await post(sim, "/v1/chat/completions", chat("hi", max_tokens="many"))
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "Bad Request" and error["param"] == "body.max_tokens"


async def test_an_unknown_model_is_a_404_naming_the_served_alias(sim) -> None:
    response = await post(sim, "/v1/chat/completions", chat("hi", model="nope"))
    assert response.status_code == 404
    message = "The model `nope` does not exist. Valid aliases: demo-llama."
    assert response.json()["error"]["message"] == message


async def test_models_and_tokenize_report_max_model_len(simulator) -> None:
    sim = simulator("--max-model-len", "64", speed=50)
    async with httpx.AsyncClient(timeout=10) as client:
        models = (await client.get(f"{sim.url}/v1/models")).json()
        counted = (await client.post(f"{sim.url}/tokenize", json={"prompt": "x"})).json()
    assert models["data"][0]["max_model_len"] == 64 and counted["max_model_len"] == 64


async def test_max_tokens_above_max_model_len_is_refused(simulator) -> None:
    sim = simulator("--max-model-len", "64", speed=50)
    async with httpx.AsyncClient(timeout=10) as client:
        body = chat("hi", max_completion_tokens=65)
        response = await client.post(f"{sim.url}/v1/chat/completions", json=body)
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "max_completion_tokens=65 cannot be greater than max_model_len=64. Please request "
        "fewer output tokens. (parameter=max_completion_tokens, value=65)"
    )


async def test_a_prompt_longer_than_the_context_is_refused(simulator) -> None:
    sim = simulator("--max-model-len", "16", speed=50)
    async with httpx.AsyncClient(timeout=10) as client:
        body = {"prompt": " ".join(["word"] * 20), "max_tokens": 1}
        response = await client.post(f"{sim.url}/v1/completions", json=body)
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["param"] == "input_tokens"
    assert error["message"].startswith(
        "This model's maximum context length is 16 tokens. However, your prompt contains at "
        "least 17 input tokens"
    )


async def test_a_given_max_tokens_is_cut_to_the_rest_of_the_context(simulator) -> None:
    sim = simulator("--max-model-len", "64", speed=50)
    async with httpx.AsyncClient(timeout=10) as client:
        body = {"prompt": "one two three four", "max_tokens": 64}
        answer = (await client.post(f"{sim.url}/v1/completions", json=body)).json()
    assert answer["usage"]["completion_tokens"] == 60
    assert answer["choices"][0]["finish_reason"] == "length"


async def test_a_prompt_filling_the_context_leaves_no_room_and_is_refused(simulator) -> None:
    filled = len(prompt_tokens("x"))
    sim = simulator("--max-model-len", str(filled), speed=50)
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.post(f"{sim.url}/v1/chat/completions", json=chat("x"))
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("max_tokens must be at least 1, got 0.")


async def test_without_max_tokens_a_small_context_cuts_the_answer_with_length(simulator) -> None:
    content = "a question"
    room = natural_length(prompt_tokens(content)) - 5
    sim = simulator("--max-model-len", str(len(prompt_tokens(content)) + room), speed=50)
    async with httpx.AsyncClient(timeout=10) as client:
        answer = (await client.post(f"{sim.url}/v1/chat/completions", json=chat(content))).json()
    assert answer["usage"]["completion_tokens"] == room
    assert answer["choices"][0]["finish_reason"] == "length"


async def test_natural_stop_always_ends_a_limited_answer_on_its_own(simulator) -> None:
    sim = simulator("--natural-stop", "always", speed=50)
    async with httpx.AsyncClient(timeout=10) as client:
        body = chat("tell me about queues", max_tokens=500)
        answer = (await client.post(f"{sim.url}/v1/chat/completions", json=body)).json()
    assert answer["choices"][0]["finish_reason"] == "stop"
    assert answer["usage"]["completion_tokens"] == natural_length(
        prompt_tokens("tell me about queues")
    )


async def test_ignore_eos_runs_to_max_tokens_even_when_answers_end_on_their_own(simulator) -> None:
    sim = simulator("--natural-stop", "always", speed=50)
    async with httpx.AsyncClient(timeout=10) as client:
        body = chat("hi", max_tokens=250, ignore_eos=True)
        answer = (await client.post(f"{sim.url}/v1/chat/completions", json=body)).json()
    assert answer["usage"]["completion_tokens"] == 250
    assert answer["choices"][0]["finish_reason"] == "length"


async def test_a_continued_answer_ends_where_the_uninterrupted_one_would(simulator) -> None:
    sim = simulator("--natural-stop", "always", speed=50)
    question = [{"role": "user", "content": "tell me about queues"}]
    async with httpx.AsyncClient(timeout=10) as client:
        url = f"{sim.url}/v1/chat/completions"
        whole = (await client.post(url, json={"messages": question})).json()
        text = whole["choices"][0]["message"]["content"]
        head = " ".join(text.split()[:5])
        body = {
            "messages": [*question, {"role": "assistant", "content": head}],
            "continue_final_message": True,
            "add_generation_prompt": False,
        }
        rest = (await client.post(url, json=body)).json()
    assert head + rest["choices"][0]["message"]["content"] == text
    assert rest["choices"][0]["finish_reason"] == "stop"


async def test_a_text_completions_default_of_16_must_fit_the_context(simulator) -> None:
    sim = simulator("--max-model-len", "8", speed=50)
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.post(f"{sim.url}/v1/completions", json={"prompt": "x"})
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith(
        "max_tokens=16 cannot be greater than max_model_len=8."
    )
