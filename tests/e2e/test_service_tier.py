"""`service_tier` through the official `openai` SDK, as docs/OPERATIONS.md has it: `flex` runs
on the batch band and the answer says `flex`; `priority` is honoured only for a key whose tier is
interactive already (it never lifts a request above its tier), else the answer says `default`."""

from __future__ import annotations

import openai
import pytest

from scheduling import BATCH, INTERACTIVE
from tests.e2e.clients import usage_field

pytestmark = pytest.mark.e2e
MODEL = "demo-llama"
MESSAGES = [{"role": "user", "content": "Hello"}]


def test_flex_is_served_on_the_batch_band_and_says_flex(client, e2e_gateway):
    answer = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=2, service_tier="flex"
    )
    assert answer.service_tier == "flex"
    assert usage_field(e2e_gateway, answer.id, "band") == BATCH


def test_each_chunk_of_a_flex_stream_says_flex(client):
    chunks = list(
        client.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=3, service_tier="flex", stream=True
        )
    )
    assert chunks and {c.service_tier for c in chunks} == {"flex"}


def test_priority_from_an_interactive_key_says_priority(client, e2e_gateway):
    answer = client.chat.completions.create(
        model=MODEL, messages=MESSAGES, max_tokens=2, service_tier="priority"
    )
    assert answer.service_tier == "priority"
    assert usage_field(e2e_gateway, answer.id, "band") == INTERACTIVE


def test_priority_from_a_batch_key_stays_on_its_band_and_says_default(e2e_gateway):
    with openai.OpenAI(
        base_url=e2e_gateway.url + "/v1", api_key=e2e_gateway.key("nightly-eval"), max_retries=0
    ) as batch_key:
        answer = batch_key.chat.completions.create(
            model=MODEL, messages=MESSAGES, max_tokens=2, service_tier="priority"
        )
    assert answer.service_tier == "default"
    assert usage_field(e2e_gateway, answer.id, "band") == BATCH
