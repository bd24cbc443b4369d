"""The official clients against a real daphne for every endpoint the gateway schedules: the
`openai` SDK's embeddings, Responses API and several choices, and Anthropic's own SDK against
/v1/messages (what coding agents speak to self-hosted models)."""

from __future__ import annotations

import anthropic
import pytest

from llmserver.testing.processes import GatewayProcess
from tests.e2e.clients import endpoints_since, usage_rows

pytestmark = pytest.mark.e2e
MODEL = "demo-llama"
EMBEDDER = "demo-embed"


def test_embeddings_of_several_inputs_come_back_in_order(client):
    response = client.embeddings.create(model=EMBEDDER, input=["first", "second", "third"])
    assert [d.index for d in response.data] == [0, 1, 2] and len(response.data[0].embedding) > 8
    assert response.usage.prompt_tokens > 0


def test_a_responses_call_streams_its_typed_events_to_the_sdk(client):
    events = list(
        client.responses.create(
            model=MODEL, input="Say something", max_output_tokens=5, stream=True
        )
    )
    assert events[0].type == "response.created" and events[-1].type == "response.completed"
    done = events[-1].response
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == done.output_text and done.usage.output_tokens == 5


def test_a_whole_responses_call_is_one_response(client):
    response = client.responses.create(model=MODEL, input="Say something", max_output_tokens=4)
    assert response.output_text and response.usage.output_tokens == 4


def test_a_conversation_continues_by_previous_response_id_through_the_sdk(client):
    """The engine keeps nothing; the gateway serves the chain (llmserver/pipeline/responses.py)."""
    first = client.responses.create(model=MODEL, input="My name is Ada", max_output_tokens=3)
    second = client.responses.create(
        model=MODEL, input="What is my name?", previous_response_id=first.id, max_output_tokens=3
    )
    assert second.previous_response_id == first.id and second.output_text
    # The whole conversation was the engine's prompt: more than this turn's input alone.
    alone = client.responses.create(model=MODEL, input="What is my name?", max_output_tokens=3)
    assert second.usage.input_tokens > alone.usage.input_tokens


def test_several_choices_come_back_as_choices(client):
    response = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "Hi"}], max_tokens=3, n=3
    )
    assert [c.index for c in response.choices] == [0, 1, 2]
    assert response.usage.completion_tokens == 9


@pytest.fixture
def claude(e2e_gateway: GatewayProcess):
    with anthropic.Anthropic(
        base_url=e2e_gateway.url, api_key=e2e_gateway.key("alice"), max_retries=0, timeout=30
    ) as c:
        yield c


def test_anthropics_sdk_gets_a_message(claude, e2e_gateway):
    message = claude.messages.create(
        model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "Hello"}]
    )
    assert message.type == "message" and message.content[0].text
    assert (message.stop_reason, message.usage.output_tokens) == ("max_tokens", 5)


def test_anthropics_sdk_streams_a_message_as_text(claude):
    with claude.messages.stream(
        model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "Hello"}]
    ) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text and final.usage.output_tokens == 5


def test_anthropics_sdk_reads_a_refusal_as_its_own_error(claude):
    with pytest.raises(anthropic.NotFoundError) as info:
        claude.messages.create(
            model="claude-none", max_tokens=5, messages=[{"role": "user", "content": "Hi"}]
        )
    assert info.value.body["error"]["type"] == "not_found_error"


def test_each_endpoints_calls_are_billed_under_their_endpoint(client, claude, e2e_gateway):
    before = set(usage_rows(e2e_gateway))
    client.embeddings.create(model=EMBEDDER, input="one")
    claude.messages.create(model=MODEL, max_tokens=2, messages=[{"role": "user", "content": "x"}])
    assert endpoints_since(e2e_gateway, before, 2) == ["embeddings", "messages"]
