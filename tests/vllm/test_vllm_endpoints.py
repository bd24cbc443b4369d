"""The real vLLM's other endpoints through the gateway's scheduler, with the official SDKs: the
Responses API and Anthropic's Messages API answered and billed once with the engine's own
counts, several choices, no gateway cap on an answer, `max_completion_tokens` passed on, and an
engine without /v1/embeddings refusing an embeddings route in a shape clients parse.

The engine's own Prometheus counters are the witness: what it counted (prompt and generated
tokens) and what it was asked (its `n` and `max_tokens` histograms), read before and after."""

from __future__ import annotations

import json
import time
from decimal import Decimal

import anthropic
import httpx
import openai
import pytest

from llmserver.testing.processes import GatewayProcess
from llmserver.testing.vllm_server import SERVED_NAME, VllmServer
from tests.real_engines import new_key, sdk, usage_rows
from tests.vllm.conftest import MODEL

pytestmark = pytest.mark.vllm
EMBEDDER = "demo-embed"
STORY = [{"role": "user", "content": "Tell me a long story about a lighthouse keeper."}]
# At temperature 0 SmolLM2-135M answers this in 8 tokens and ends on its own (<|im_end|>).
ONE_WORD = [{"role": "user", "content": "What is the capital of France? One word."}]
OLD_GATEWAY_CAP = 256  # what the gateway used to send for a request without max_tokens


def counters(vllm: VllmServer) -> dict[str, float]:
    """The engine's counts, once it holds no request (nothing else is counted meanwhile)."""
    deadline = time.monotonic() + 30
    while vllm.busy():
        assert time.monotonic() < deadline, "the engine never went idle"
        time.sleep(0.1)
    values = vllm.metrics()
    names = (
        "vllm:prompt_tokens_total",
        "vllm:generation_tokens_total",
        "vllm:request_params_n_sum",
        "vllm:request_params_max_tokens_sum",
    )
    return {name.split(":")[1].removesuffix("_total"): values[name] for name in names}


def counted(before: dict[str, float], vllm: VllmServer) -> dict[str, float]:
    """What the engine counted since `before`."""
    after = counters(vllm)
    return {name: after[name] - before[name] for name in before}


ROW = ("endpoint", "status", "error_type", "prompt_tokens", "completion_tokens", "cost")


def the_row(gateway: GatewayProcess, user: str) -> dict[str, object]:
    """`user`'s one usage row, once written (the gateway flushes every 0.1 s)."""
    deadline = time.monotonic() + 10
    while not (rows := usage_rows(gateway, user, ROW)):
        assert time.monotonic() < deadline, "no usage row written"
        time.sleep(0.2)
    (row,) = rows
    return row


def billed(row: dict[str, object]) -> tuple[object, ...]:
    return row["endpoint"], row["status"], row["prompt_tokens"], row["completion_tokens"]


def claude(gateway: GatewayProcess, key: str) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=gateway.url, api_key=key, max_retries=0, timeout=120)


def test_a_whole_response_is_billed_once_the_engines_counts(gateway, vllm):
    client = sdk(gateway, new_key(gateway, "responses-whole"))
    before = counters(vllm)
    response = client.responses.create(
        model=MODEL, input="Name three colours.", max_output_tokens=8
    )
    engine = counted(before, vllm)
    assert response.output_text and response.model == MODEL and response.usage is not None
    usage = response.usage
    assert (usage.input_tokens, usage.output_tokens) == (
        engine["prompt_tokens"],
        engine["generation_tokens"],
    )
    assert 0 < usage.output_tokens <= 8
    row = the_row(gateway, "responses-whole")
    assert billed(row) == ("responses", "ok", usage.input_tokens, usage.output_tokens)


def test_a_streamed_response_is_billed_once_from_its_completed_event(gateway, vllm):
    client = sdk(gateway, new_key(gateway, "responses-stream"))
    before = counters(vllm)
    stream = client.responses.create(
        model=MODEL, input="Name three colours.", max_output_tokens=8, stream=True
    )
    events = list(stream)
    engine = counted(before, vllm)
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    final = events[-1].response
    assert text and text == final.output_text and final.model == MODEL
    usage = final.usage
    assert usage is not None
    assert (usage.input_tokens, usage.output_tokens) == (
        engine["prompt_tokens"],
        engine["generation_tokens"],
    )
    row = the_row(gateway, "responses-stream")
    assert billed(row) == ("responses", "ok", usage.input_tokens, usage.output_tokens)


def test_a_conversation_continues_by_previous_response_id_and_nobody_else_can(gateway, vllm):
    """The gateway keeps the Responses state (docs/OPERATIONS.md): a chained request reaches the
    engine as the whole conversation (its prompt is longer than the same input alone), and a
    caller who was not given the id, another user of the tenant, gets a 404 with nothing sent."""
    ada = sdk(gateway, new_key(gateway, "chain-ada"))
    first = ada.responses.create(model=MODEL, input="My name is Ada.", max_output_tokens=8)
    before = counters(vllm)
    second = ada.responses.create(
        model=MODEL, input="What is my name?", previous_response_id=first.id, max_output_tokens=8
    )
    chained = counted(before, vllm)
    before = counters(vllm)
    ada.responses.create(model=MODEL, input="What is my name?", max_output_tokens=8)
    alone = counted(before, vllm)
    assert second.usage is not None and second.usage.input_tokens == chained["prompt_tokens"]
    assert chained["prompt_tokens"] > alone["prompt_tokens"]
    bob = sdk(gateway, new_key(gateway, "chain-bob"))
    before = counters(vllm)
    with pytest.raises(openai.NotFoundError):
        bob.responses.create(model=MODEL, input="What is her name?", previous_response_id=first.id)
    assert counted(before, vllm)["prompt_tokens"] == 0


def test_a_whole_anthropic_message_is_billed_once_the_engines_counts(gateway, vllm):
    client = claude(gateway, new_key(gateway, "messages-whole"))
    before = counters(vllm)
    message = client.messages.create(model=MODEL, max_tokens=8, messages=STORY)
    engine = counted(before, vllm)
    assert message.type == "message" and message.model == MODEL
    assert message.content[0].type == "text" and message.content[0].text
    usage = message.usage
    assert (usage.input_tokens, usage.output_tokens) == (
        engine["prompt_tokens"],
        engine["generation_tokens"],
    )
    row = the_row(gateway, "messages-whole")
    assert billed(row) == ("messages", "ok", usage.input_tokens, usage.output_tokens)


def test_a_streamed_anthropic_message_is_billed_once_from_its_last_usage(gateway, vllm):
    client = claude(gateway, new_key(gateway, "messages-stream"))
    before = counters(vllm)
    events = list(client.messages.create(model=MODEL, max_tokens=8, messages=STORY, stream=True))
    engine = counted(before, vllm)
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    text = "".join(e.delta.text for e in events if e.type == "content_block_delta")
    assert text and events[0].message.model == MODEL
    prompt, output = events[0].message.usage.input_tokens, events[-2].usage.output_tokens
    assert (prompt, output) == (engine["prompt_tokens"], engine["generation_tokens"])
    row = the_row(gateway, "messages-stream")
    assert billed(row) == ("messages", "ok", prompt, output)


def test_two_choices_are_one_request_billed_both_choices_tokens(gateway, vllm):
    client = sdk(gateway, new_key(gateway, "two-choices"))
    before = counters(vllm)
    # Sampled (vLLM refuses n > 1 at temperature 0) and seeded: the same two answers each run.
    response = client.chat.completions.create(
        model=MODEL, messages=STORY, max_tokens=6, n=2, seed=7
    )
    engine = counted(before, vllm)
    assert [c.index for c in response.choices] == [0, 1]
    assert [c.finish_reason for c in response.choices] == ["length", "length"]
    assert engine["request_params_n_sum"] == 2  # one request of two sequences
    usage = response.usage
    assert usage is not None
    assert usage.completion_tokens == engine["generation_tokens"] == 2 * 6
    row = the_row(gateway, "two-choices")
    assert billed(row) == ("chat", "ok", usage.prompt_tokens, 12)


def test_a_chat_without_max_tokens_reaches_the_engine_without_one_and_ends_on_its_own(
    gateway, vllm
):
    """No max_tokens sent: the engine allows the rest of its context (its `max_tokens`
    histogram grows by that), where it used to be told the gateway's 256."""
    context = httpx.get(vllm.url + "/v1/models", timeout=5).json()["data"][0]["max_model_len"]
    client = sdk(gateway, new_key(gateway, "no-max-tokens"))
    before = counters(vllm)
    response = client.chat.completions.create(model=MODEL, messages=ONE_WORD, temperature=0)
    engine = counted(before, vllm)
    choice, usage = response.choices[0], response.usage
    assert choice.finish_reason == "stop" and choice.message.content and usage is not None
    assert engine["request_params_max_tokens_sum"] == context - usage.prompt_tokens
    assert context - usage.prompt_tokens > OLD_GATEWAY_CAP
    row = the_row(gateway, "no-max-tokens")
    assert billed(row) == ("chat", "ok", usage.prompt_tokens, usage.completion_tokens)


def test_max_completion_tokens_is_the_engines_limit(gateway, vllm):
    client = sdk(gateway, new_key(gateway, "max-completion"))
    before = counters(vllm)
    response = client.chat.completions.create(
        model=MODEL, messages=STORY, max_completion_tokens=5, temperature=0
    )
    engine = counted(before, vllm)
    assert engine["request_params_max_tokens_sum"] == 5
    assert response.choices[0].finish_reason == "length"
    assert response.usage is not None and response.usage.completion_tokens == 5
    row = the_row(gateway, "max-completion")
    assert billed(row) == ("chat", "ok", response.usage.prompt_tokens, 5)


def refused_once_routed(client: openai.OpenAI) -> openai.NotFoundError:
    """The refusal of an embeddings request once the gateway has loaded the route (it reads
    the configuration's change counter every 0.5 s); until then, its own 404 for a model it
    does not serve on /v1/embeddings."""
    deadline = time.monotonic() + 10
    while True:
        with pytest.raises(openai.NotFoundError) as refused:
            client.embeddings.create(model=EMBEDDER, input="A lighthouse.")
        if refused.value.code != "model_not_found":
            return refused.value
        assert time.monotonic() < deadline, "the gateway never loaded the embeddings route"
        time.sleep(0.25)


def test_an_engine_without_embeddings_is_a_404_in_openais_shape_billed_nothing(gateway, vllm):
    """vLLM serving a generation model registers no /v1/embeddings route (Starlette's 404,
    `{"detail": "Not Found"}`); a route that says this engine serves embeddings gets that
    refusal, in OpenAI's error shape, and the backend keeps serving chats."""
    direct = httpx.post(
        vllm.url + "/v1/embeddings", json={"model": SERVED_NAME, "input": "x"}, timeout=10
    )
    assert (direct.status_code, direct.json()) == (404, {"detail": "Not Found"})
    route = f"{EMBEDDER}:{SERVED_NAME}"
    gateway.manage("add_backend", "vllm", vllm.url, "--model", route, "--endpoints", "embeddings")
    client = sdk(gateway, new_key(gateway, "embeddings"))
    refusal = refused_once_routed(client)
    assert (refusal.status_code, refusal.code, refusal.type) == (
        404,
        "upstream_rejected",
        "invalid_request_error",
    )
    assert set(json.loads(refusal.response.text)["error"]) == {"message", "type", "param", "code"}
    assert refusal.response.headers["x-request-id"]
    deadline = time.monotonic() + 10
    while not (rows := usage_rows(gateway, "embeddings", ROW)) or rows[-1]["status"] != "error":
        assert time.monotonic() < deadline, "no usage row for the refusal"
        time.sleep(0.2)
    # Before the route was loaded, the gateway's own refusals ("rejected"); then one error.
    assert [
        (r["endpoint"], r["status"], r["error_type"]) for r in rows if r["status"] != "rejected"
    ] == [("embeddings", "error", "upstream_rejected")]
    assert all(r["completion_tokens"] == 0 and Decimal(str(r["cost"])) == 0 for r in rows)
    chat = client.chat.completions.create(model=MODEL, messages=STORY, max_tokens=2)
    assert chat.choices[0].message.content


def test_the_engine_counts_a_messages_prompt_as_its_message_does(vllm):
    """docs/BACKENDS.md (the simulator): vLLM serves /v1/messages/count_tokens, the prompt's
    length as /v1/messages then bills it, with `context_management` saying the same."""
    body = {"model": SERVED_NAME, "messages": STORY}
    counted = httpx.post(vllm.url + "/v1/messages/count_tokens", json=body, timeout=60)
    assert counted.status_code == 200
    message = httpx.post(vllm.url + "/v1/messages", json={**body, "max_tokens": 1}, timeout=60)
    prompt = message.json()["usage"]["input_tokens"]
    assert counted.json() == {
        "input_tokens": prompt,
        "context_management": {"original_input_tokens": prompt},
    }


def test_only_the_completed_event_of_a_streamed_response_carries_usage(vllm):
    """docs/BACKENDS.md (the simulator): the engine's own Responses stream, read raw."""
    body = {"model": SERVED_NAME, "input": "Name three colours.", "max_output_tokens": 8}
    with httpx.stream(
        "POST", vllm.url + "/v1/responses", json={**body, "stream": True}, timeout=60
    ) as answer:
        events = [json.loads(line[6:]) for line in answer.iter_lines() if line.startswith("data: ")]
    with_usage = [e["type"] for e in events if (e.get("response") or {}).get("usage")]
    assert with_usage == ["response.completed"] and events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["usage"]["output_tokens"] > 0
