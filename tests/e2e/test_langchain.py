"""LangChain's OpenAI integration (`langchain-openai`) against a real daphne: the chat model
whole and streamed, through the chat API and through the Responses API (`use_responses_api`),
and the embeddings, as applications built on LangChain reach a self-hosted model.

`OpenAIEmbeddings` counts each text's tokens with tiktoken before sending it unless
`check_embedding_ctx_length=False`; tiktoken downloads its encoding on first use, and knows no
tokenizer of a self-hosted model anyway, so LangChain's own guide for OpenAI-compatible servers
turns the check off, as do these tests (they need no network)."""

from __future__ import annotations

import pytest
from langchain_core.messages import AIMessageChunk
from langchain_openai import ChatOpenAI, OpenAIEmbeddings

from llmserver.testing.processes import GatewayProcess
from tests.e2e.clients import endpoints_since, usage_rows

pytestmark = pytest.mark.e2e
MODEL = "demo-llama"
EMBEDDER = "demo-embed"


def chat_model(gateway: GatewayProcess, **options: object) -> ChatOpenAI:
    return ChatOpenAI(
        model=MODEL,
        base_url=gateway.url + "/v1",
        api_key=gateway.key("alice"),
        max_tokens=5,
        max_retries=0,
        timeout=30,
        **options,
    )


def streamed(model: ChatOpenAI, prompt: str) -> AIMessageChunk:
    whole: AIMessageChunk | None = None
    for chunk in model.stream(prompt):
        whole = chunk if whole is None else whole + chunk
    assert whole is not None
    return whole


def test_the_chat_model_gets_an_answer_and_its_usage(e2e_gateway):
    message = chat_model(e2e_gateway).invoke("Hello")
    assert message.content and message.usage_metadata["output_tokens"] == 5
    assert message.response_metadata["finish_reason"] == "length"


def test_the_chat_model_streams_the_same_answer_with_its_usage(e2e_gateway):
    whole = chat_model(e2e_gateway).invoke("Hello").content
    message = streamed(chat_model(e2e_gateway, stream_usage=True), "Hello")
    assert message.content == whole and message.usage_metadata["output_tokens"] == 5


def test_the_chat_model_through_the_responses_api_is_billed_as_responses(e2e_gateway):
    before = set(usage_rows(e2e_gateway))
    message = chat_model(e2e_gateway, use_responses_api=True).invoke("Hello")
    assert message.text and message.usage_metadata["output_tokens"] == 5
    assert endpoints_since(e2e_gateway, before) == ["responses"]


def test_the_chat_model_streams_through_the_responses_api(e2e_gateway):
    whole = chat_model(e2e_gateway, use_responses_api=True).invoke("Hello").text
    message = streamed(chat_model(e2e_gateway, use_responses_api=True), "Hello")
    assert message.text == whole and message.usage_metadata["output_tokens"] == 5


def test_embeddings_of_documents_and_of_a_query_agree(e2e_gateway):
    embeddings = OpenAIEmbeddings(
        model=EMBEDDER,
        base_url=e2e_gateway.url + "/v1",
        api_key=e2e_gateway.key("alice"),
        check_embedding_ctx_length=False,
        max_retries=0,
    )
    first, second = embeddings.embed_documents(["first", "second"])
    assert len(first) > 8 and first != second
    assert embeddings.embed_query("second") == pytest.approx(second)
