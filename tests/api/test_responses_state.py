"""The gateway owns the Responses state it exposes: the response ids it returns are its own and
kept with their tenant and user, a `previous_response_id` the caller was not given is a 404
before anything reaches the engine, and a chain is served by sending the engine the whole
conversation, so it works on an engine that keeps nothing and never uses one's shared store.

The engine here keeps responses as vLLM does with `VLLM_ENABLE_RESPONSES_API_STORE=1` (one store
for every caller; simulator/responses.py): without the gateway's own state, another tenant could
continue, and so read, any response of it.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import httpx
import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from simulator.launcher import RunningSimulator, start_simulator
from simulator.protocol import chat_prompt, tokenize
from tenants.models import StoredResponse, UsageRecord
from tests.api.conftest import MODEL, AcmeCast, read_all, simulator_metric, start
from tests.api.http_helpers import openai_error


@pytest.fixture(scope="module")
def simulator() -> Iterator[RunningSimulator]:
    """The engine, with vLLM's shared response store on (it must never matter)."""
    sim = start_simulator(
        "--max-num-seqs", "4", "--model", MODEL, "--speed", "10", "--enable-responses-store"
    )
    yield sim
    sim.stop()


async def respond(key: str | None, **fields: Any) -> tuple[int, dict[bytes, bytes], Any]:
    body = json.dumps({"model": MODEL, "max_output_tokens": 4, **fields}).encode()
    status, headers, raw = await read_all(await start(key, body, "/v1/responses"))
    return status, headers, json.loads(raw)


async def engine_counts(sim: RunningSimulator) -> tuple[float, float]:
    """How many requests the engine has finished, and the prompt tokens it has read."""
    return (
        await simulator_metric(sim, "vllm:request_success_total"),
        await simulator_metric(sim, "vllm:prompt_tokens_total"),
    )


def stream_events(raw: bytes) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for block in raw.decode().split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line)
        if "event" in lines and "data" in lines:
            found.append((lines["event"], json.loads(lines["data"])))
    return found


async def test_a_response_id_is_the_gateways_own_and_is_kept_with_its_owner(
    gateway, acme_cast: AcmeCast
):
    status, headers, body = await respond(acme_cast.keys["owner"], input="Hello")
    assert status == 200 and body["id"].startswith("resp_")
    assert headers[b"x-request-id"].decode() == body["id"]
    row = await sync_to_async(StoredResponse.objects.get)(pk=body["id"])
    assert (row.tenant_id, row.user, row.model) == (acme_cast.tenant.pk, "alice", MODEL)
    assert row.expires_at > timezone.now() + timedelta(days=29)
    await gateway.usage.flush_once()
    usage = await sync_to_async(UsageRecord.objects.get)(request_id=body["id"])
    assert (usage.status, usage.endpoint) == ("ok", "responses")


async def test_a_streamed_response_names_the_gateways_id_in_every_response_event(
    gateway, acme_cast: AcmeCast
):
    body = json.dumps({"model": MODEL, "max_output_tokens": 3, "input": "Hi", "stream": True})
    comm = await start(acme_cast.keys["owner"], body.encode(), "/v1/responses")
    status, headers, raw = await read_all(comm)
    request_id = headers[b"x-request-id"].decode()
    ids = {data["response"]["id"] for _, data in stream_events(raw) if "response" in data}
    assert status == 200 and ids == {request_id}
    assert await sync_to_async(StoredResponse.objects.filter(pk=request_id).exists)()


async def test_a_response_with_store_false_is_not_kept(gateway, acme_cast: AcmeCast):
    _, _, body = await respond(acme_cast.keys["owner"], input="Hello", store=False)
    assert not await sync_to_async(StoredResponse.objects.filter(pk=body["id"]).exists)()
    status, _, refused = await respond(
        acme_cast.keys["owner"], input="Again", previous_response_id=body["id"]
    )
    assert status == 404 and refused["error"]["code"] == "previous_response_not_found"


async def test_another_tenants_previous_response_is_a_404_and_the_engine_sees_nothing(
    gateway, acme_cast: AcmeCast, world
):
    _, _, first = await respond(acme_cast.keys["owner"], input="My secret is 42")
    before = await engine_counts(world["sim"])
    status, _, body = await respond(
        acme_cast.keys["other_tenant"],
        input="What was the secret?",
        previous_response_id=first["id"],
    )
    assert status == 404
    error = openai_error(json.dumps(body).encode())
    assert (error["param"], error["code"]) == (
        "previous_response_id",
        "previous_response_not_found",
    )
    assert await engine_counts(world["sim"]) == before


async def test_a_previous_response_of_another_user_is_the_same_404_as_one_never_made(
    gateway, acme_cast: AcmeCast
):
    _, _, first = await respond(acme_cast.keys["owner"], input="Mine")
    _, _, theirs = await respond(
        acme_cast.keys["same_tenant"], input="x", previous_response_id=first["id"]
    )
    _, _, nobodys = await respond(
        acme_cast.keys["same_tenant"], input="x", previous_response_id="resp_never"
    )
    assert theirs["error"]["message"].replace(first["id"], "ID") == nobodys["error"][
        "message"
    ].replace("resp_never", "ID")


async def test_the_tenant_administrator_may_continue_a_users_response(gateway, acme_cast: AcmeCast):
    _, _, first = await respond(acme_cast.keys["owner"], input="Mine")
    status, _, body = await respond(
        acme_cast.keys["tenant_admin"], input="Go on", previous_response_id=first["id"]
    )
    assert status == 200 and body["previous_response_id"] == first["id"]


async def test_a_chained_request_reaches_the_engine_as_the_whole_conversation(
    gateway, acme_cast: AcmeCast
):
    key = acme_cast.keys["owner"]
    _, _, first = await respond(key, input="My name is Ada", instructions="Be brief")
    answer = first["output"][0]["content"][0]["text"]
    status, _, second = await respond(
        key, input="What is my name?", previous_response_id=first["id"]
    )
    assert status == 200 and second["previous_response_id"] == first["id"]
    # Instructions are not carried over (OpenAI's rule, and vLLM's construct_input_messages).
    conversation = [
        {"role": "user", "content": "My name is Ada"},
        {"role": "assistant", "content": answer},
        {"role": "user", "content": "What is my name?"},
    ]
    assert second["usage"]["input_tokens"] == len(tokenize(chat_prompt(conversation)))


async def test_a_chain_of_three_turns_carries_every_earlier_turn(gateway, acme_cast: AcmeCast):
    key = acme_cast.keys["owner"]
    _, _, one = await respond(key, input="one")
    _, _, two = await respond(key, input="two", previous_response_id=one["id"])
    _, _, three = await respond(key, input="three", previous_response_id=two["id"])
    texts = [r["output"][0]["content"][0]["text"] for r in (one, two)]
    conversation = [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": texts[0]},
        {"role": "user", "content": "two"},
        {"role": "assistant", "content": texts[1]},
        {"role": "user", "content": "three"},
    ]
    assert three["usage"]["input_tokens"] == len(tokenize(chat_prompt(conversation)))


async def test_the_engines_own_store_is_never_used(gateway, acme_cast: AcmeCast, world):
    _, _, body = await respond(acme_cast.keys["owner"], input="Hello")
    async with httpx.AsyncClient() as client:
        stored = await client.get(f"{world['sim'].url}/v1/responses/{body['id']}")
    assert stored.status_code == 404  # the engine was sent `store: false`


async def test_an_expired_response_is_not_found(gateway, acme_cast: AcmeCast):
    _, _, first = await respond(acme_cast.keys["owner"], input="Old")
    await sync_to_async(StoredResponse.objects.filter(pk=first["id"]).update)(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    status, _, _ = await respond(
        acme_cast.keys["owner"], input="x", previous_response_id=first["id"]
    )
    assert status == 404


async def test_a_refused_previous_response_writes_one_rejected_usage_row(
    gateway, acme_cast: AcmeCast
):
    status, headers, _ = await respond(
        acme_cast.keys["owner"], input="x", previous_response_id="resp_never"
    )
    assert status == 404
    await gateway.usage.flush_once()
    rows = await sync_to_async(list)(
        UsageRecord.objects.filter(request_id=headers[b"x-request-id"].decode()).values()
    )
    assert [(r["status"], r["completion_tokens"]) for r in rows] == [("rejected", 0)]


@pytest.mark.parametrize(
    ("field", "value"),
    [("previous_response_id", 42), ("previous_response_id", ""), ("store", "yes")],
)
async def test_a_malformed_state_field_is_a_400_naming_it(
    gateway, acme_cast: AcmeCast, field, value
):
    status, _, body = await respond(acme_cast.keys["owner"], input="x", **{field: value})
    assert status == 400 and body["error"]["param"] == field
