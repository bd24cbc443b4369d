"""POST /v1/embeddings as vLLM 0.32 serves it for an embedding model: inputs as text, texts or
token ids, float or base64 or raw bytes, `dimensions` refused for a non-Matryoshka model, each
prompt run through the engine; and the route is missing (404) from a generation runner, as on a
vLLM serving a generation model (see simulator/embeddings.py and simulator/app.py)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import math
import struct
from collections.abc import Iterator

import httpx
import openai
import pytest
from backend_helpers import read_metrics, wait_for
from endpoint_helpers import hold_stream, sample

from simulator.launcher import RunningSimulator, start_simulator


@pytest.fixture(scope="module")
def sim() -> Iterator[RunningSimulator]:
    with start_simulator(speed=50) as running:
        yield running


async def embed(sim: RunningSimulator, **body: object) -> httpx.Response:
    async with httpx.AsyncClient(timeout=10) as client:
        return await client.post(f"{sim.url}/v1/embeddings", json={"model": "demo-llama", **body})


async def test_a_string_gets_one_64_number_embedding_in_openais_list_shape(sim) -> None:
    body = (await embed(sim, input="the quick brown fox")).json()
    assert body["object"] == "list" and body["model"] == "demo-llama"
    assert body["id"].startswith("embd-")
    [item] = body["data"]
    assert item["object"] == "embedding" and item["index"] == 0 and len(item["embedding"]) == 64
    assert body["usage"] == {
        "prompt_tokens": 4,
        "total_tokens": 4,
        "completion_tokens": 0,
        "prompt_tokens_details": None,
        "completion_tokens_details": None,
    }


async def test_a_list_of_strings_gets_one_embedding_per_input_in_order(sim) -> None:
    body = (await embed(sim, input=["alpha beta", "gamma", "alpha beta"])).json()
    assert [d["index"] for d in body["data"]] == [0, 1, 2]
    vectors = [d["embedding"] for d in body["data"]]
    assert vectors[0] == vectors[2] and vectors[0] != vectors[1]
    assert body["usage"]["prompt_tokens"] == 5


async def test_token_ids_and_lists_of_token_ids_are_prompts_of_that_many_tokens(sim) -> None:
    one = (await embed(sim, input=[101, 2023, 102])).json()
    many = (await embed(sim, input=[[1, 2], [3, 4, 5, 6]])).json()
    assert len(one["data"]) == 1 and one["usage"]["prompt_tokens"] == 3
    assert len(many["data"]) == 2 and many["usage"]["prompt_tokens"] == 6


async def test_an_embedding_is_a_deterministic_unit_vector(sim) -> None:
    first = (await embed(sim, input="fair turns for every user")).json()["data"][0]["embedding"]
    again = (await embed(sim, input="fair turns for every user")).json()["data"][0]["embedding"]
    assert first == again
    assert math.isclose(math.sqrt(sum(v * v for v in first)), 1.0, rel_tol=1e-5)


async def test_texts_sharing_words_are_closer_than_unrelated_texts(sim) -> None:
    body = (
        await embed(sim, input=["the lazy dog sleeps", "the lazy dog", "quick brown fox"])
    ).json()
    a, b, c = (d["embedding"] for d in body["data"])
    dot = lambda x, y: sum(p * q for p, q in zip(x, y, strict=True))  # noqa: E731
    assert dot(a, b) > dot(a, c)


async def test_base64_is_the_float32_bytes_of_the_float_embedding(sim) -> None:
    floats = (await embed(sim, input="hello")).json()["data"][0]["embedding"]
    packed = (await embed(sim, input="hello", encoding_format="base64")).json()["data"][0]
    assert list(struct.unpack("<64f", base64.b64decode(packed["embedding"]))) == floats


async def test_bytes_is_raw_float32_with_the_json_in_a_metadata_header(sim) -> None:
    floats = (await embed(sim, input=["a", "b"])).json()["data"]
    response = await embed(sim, input=["a", "b"], encoding_format="bytes")
    assert response.headers["content-type"] == "application/octet-stream"
    metadata = json.loads(response.headers["metadata"])
    assert [(d["start"], d["end"], d["shape"]) for d in metadata["data"]] == [
        (0, 256, [64]),
        (256, 512, [64]),
    ]
    assert metadata["usage"] == {"prompt_tokens": 2, "total_tokens": 2}
    assert list(struct.unpack("<64f", response.content[:256])) == floats[0]["embedding"]


async def test_dimensions_is_refused_as_vllm_refuses_it_for_a_non_matryoshka_model(sim) -> None:
    response = await embed(sim, input="x", dimensions=32)
    assert response.status_code == 400
    assert response.json()["error"] == {
        "message": "Model 'demo-llama' does not support Matryoshka embeddings; dimensions must "
        "be unset (received dimensions=32).",
        "type": "BadRequestError",
        "param": None,
        "code": 400,
    }


async def test_an_empty_input_list_is_refused(sim) -> None:
    response = await embed(sim, input=[])
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "You must pass at least one prompt"


async def test_an_unknown_encoding_format_is_a_validation_error(sim) -> None:
    response = await embed(sim, input="x", encoding_format="int8")
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["type"] == "Bad Request" and error["param"] == "body.encoding_format"


async def test_the_model_name_is_not_checked_as_on_vllms_pooling_server(sim) -> None:
    response = await embed(sim, input="x", model="some-other-name")
    assert response.status_code == 200 and response.json()["model"] == "demo-llama"


async def test_the_openai_sdk_reads_the_embeddings(sim) -> None:
    client = openai.AsyncOpenAI(base_url=f"{sim.url}/v1", api_key="none")
    result = await client.embeddings.create(model="demo-llama", input=["one", "two words"])
    assert [len(d.embedding) for d in result.data] == [64, 64]
    assert result.usage.prompt_tokens == 3
    await client.close()


async def test_embeddings_count_their_prompt_tokens_and_finish_as_stop(simulator) -> None:
    sim = simulator(speed=50)
    async with httpx.AsyncClient(timeout=10) as client:
        await client.post(f"{sim.url}/v1/embeddings", json={"input": ["one two three", "four"]})
        assert await sample(client, sim, "vllm:prompt_tokens_total") == 4
        assert await sample(client, sim, "vllm:generation_tokens_total") == 0
        stops = await sample(client, sim, "vllm:request_success_total", finished_reason="stop")
        assert stops == 2


async def test_an_embedding_waits_for_a_batch_slot(simulator) -> None:
    sim = simulator("--max-num-seqs", "1")
    long = {"prompt": "tell me a long story", "max_tokens": 5000, "stream": True}
    async with httpx.AsyncClient(timeout=10) as client:
        started = asyncio.Event()
        holder = asyncio.create_task(
            hold_stream(client, f"{sim.url}/v1/completions", long, started)
        )
        await asyncio.wait_for(started.wait(), 10)
        embedding = asyncio.create_task(
            client.post(f"{sim.url}/v1/embeddings", json={"input": "x"})
        )

        async def queued() -> bool:
            m = await read_metrics(client, sim)
            return m.running == 1 and m.waiting == 1

        await wait_for(queued)
        assert not embedding.done()
        holder.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await holder
        assert (await asyncio.wait_for(embedding, 10)).status_code == 200


async def test_a_generation_runner_has_no_embeddings_route(simulator) -> None:
    sim = simulator("--runner", "generate", speed=50)
    async with httpx.AsyncClient(timeout=10) as client:
        response = await client.post(f"{sim.url}/v1/embeddings", json={"input": "x"})
        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        served = await client.post(f"{sim.url}/v1/chat/completions", json=chat)
    assert response.status_code == 404 and response.json() == {"detail": "Not Found"}
    assert served.status_code == 200


async def test_a_pooling_runner_has_no_generation_routes(simulator) -> None:
    sim = simulator("--runner", "pooling", speed=50)
    async with httpx.AsyncClient(timeout=10) as client:
        chat = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}
        refused = await client.post(f"{sim.url}/v1/chat/completions", json=chat)
        served = await client.post(f"{sim.url}/v1/embeddings", json={"input": "x"})
    assert refused.status_code == 404 and served.status_code == 200
