"""LiteLLM as a client against a real daphne: `openai/<model>` with the gateway as `api_base`,
as applications and agent frameworks built on LiteLLM reach a self-hosted model; completions
whole and streamed, synchronous and asynchronous, embeddings, and a refusal read as LiteLLM's
own exception.

LiteLLM fetches its model price list from the internet when imported unless
LITELLM_LOCAL_MODEL_COST_MAP is set; it is set before the import, so these tests need no
network (its token counting uses the tiktoken encodings it ships)."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
import litellm

from tests.e2e.clients import endpoints_since, usage_rows

pytestmark = [
    pytest.mark.e2e,
    # LiteLLM's own types, as pydantic reads them; nothing of the gateway's.
    pytest.mark.filterwarnings(
        "ignore:Items? .* (is|are) using the `ReadOnly` qualifier:UserWarning"
    ),
]
MODEL = "openai/demo-llama"
MESSAGES = [{"role": "user", "content": "Hello"}]


@pytest.fixture
def gateway(e2e_gateway):
    """LiteLLM's arguments for the gateway: its base URL and alice's key."""
    return {
        "api_base": e2e_gateway.url + "/v1",
        "api_key": e2e_gateway.key("alice"),
        "num_retries": 0,
        "timeout": 30,
    }


def test_a_completion_comes_back_with_its_usage(gateway):
    response = litellm.completion(model=MODEL, messages=MESSAGES, max_tokens=5, **gateway)
    assert response.choices[0].message.content and response.usage.completion_tokens == 5
    assert response.choices[0].finish_reason == "length"


def test_a_streamed_completion_is_the_same_answer(gateway):
    whole = litellm.completion(model=MODEL, messages=MESSAGES, max_tokens=5, **gateway)
    chunks = litellm.completion(
        model=MODEL, messages=MESSAGES, max_tokens=5, stream=True, **gateway
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks)
    assert text == whole.choices[0].message.content


async def test_an_asynchronous_stream_is_the_same_answer(gateway):
    whole = await litellm.acompletion(model=MODEL, messages=MESSAGES, max_tokens=5, **gateway)
    chunks = await litellm.acompletion(
        model=MODEL, messages=MESSAGES, max_tokens=5, stream=True, **gateway
    )
    text = "".join([c.choices[0].delta.content or "" async for c in chunks])
    assert text == whole.choices[0].message.content


def test_embeddings_come_back_in_order_and_are_billed_as_embeddings(gateway, e2e_gateway):
    before = set(usage_rows(e2e_gateway))
    response = litellm.embedding(model="openai/demo-embed", input=["first", "second"], **gateway)
    assert [d["index"] for d in response.data] == [0, 1]
    assert response.usage.prompt_tokens > 0
    assert endpoints_since(e2e_gateway, before) == ["embeddings"]


def test_an_unknown_model_is_litellms_not_found_error(gateway):
    with pytest.raises(litellm.NotFoundError):
        litellm.completion(model="openai/none", messages=MESSAGES, max_tokens=5, **gateway)
