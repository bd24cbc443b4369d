"""The official `openai` package's Batch API calls against a real daphne serving the gateway:
upload, list and retrieve files, create, poll until done, read the output and the error file,
cancel."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest

from llmserver.testing.processes import Database, GatewayProcess, start_gateway
from simulator.launcher import RunningSimulator

pytestmark = pytest.mark.e2e
MODEL = "demo-llama"


@pytest.fixture(scope="module")
def batch_gateway(
    e2e_simulator: RunningSimulator, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[GatewayProcess]:
    tmp = Path(tmp_path_factory.mktemp("e2e-batches"))
    database = Database(tmp)
    env = {"SCRAPE_INTERVAL": "0.05", "FILES_DIR": str(tmp / "files"), "BATCH_POLL_INTERVAL": "0.1"}
    gateway = start_gateway(database.url, e2e_simulator.url, env)
    yield gateway
    gateway.stop()
    database.drop()


@pytest.fixture
def client(batch_gateway):
    with openai.OpenAI(
        base_url=batch_gateway.url + "/v1", api_key=batch_gateway.key("alice"), max_retries=0
    ) as c:
        yield c


def line(custom_id: str, max_tokens: Any = 3) -> bytes:
    content = [{"role": "user", "content": custom_id}]
    body = {"model": MODEL, "max_tokens": max_tokens, "messages": content}
    request = {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": body,
    }
    return json.dumps(request).encode() + b"\n"


def run(client: openai.OpenAI, content: bytes) -> openai.types.Batch:
    """Upload `content`, create its batch and return it once it has ended."""
    uploaded = client.files.create(file=("in.jsonl", content), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    return wait(client, batch)


def wait(client: openai.OpenAI, batch: openai.types.Batch) -> openai.types.Batch:
    deadline = time.monotonic() + 30
    while batch.status not in ("completed", "failed", "expired", "cancelled"):
        assert time.monotonic() < deadline, batch
        time.sleep(0.1)
        batch = client.batches.retrieve(batch.id)
    return batch


def answers(client: openai.OpenAI, file_id: str) -> dict[str, Any]:
    text = client.files.content(file_id).text
    return {json.loads(line)["custom_id"]: json.loads(line) for line in text.splitlines()}


def test_the_sdk_runs_a_batch_from_upload_to_output(client):
    uploaded = client.files.create(file=("in.jsonl", line("a") + line("b")), purpose="batch")
    assert uploaded.purpose == "batch" and uploaded.bytes > 0
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    batch = wait(client, batch)
    assert batch.status == "completed" and batch.request_counts.completed == 2
    assert batch.id in [b.id for b in client.batches.list()]
    output = answers(client, batch.output_file_id)
    assert sorted(output) == ["a", "b"]
    assert all(a["response"]["status_code"] == 200 for a in output.values())
    assert client.files.delete(uploaded.id).deleted


def test_the_sdk_lists_and_retrieves_the_uploaded_files(client):
    uploaded = client.files.create(file=("mine.jsonl", line("a")), purpose="batch")
    assert uploaded.id in [f.id for f in client.files.list()]
    found = client.files.retrieve(uploaded.id)
    assert (found.filename, found.bytes, found.purpose) == ("mine.jsonl", uploaded.bytes, "batch")
    with pytest.raises(openai.NotFoundError):
        client.files.retrieve("file-none")


def test_a_line_refused_when_it_runs_is_in_the_error_file(client):
    batch = run(client, line("good") + line("bad", max_tokens="many"))
    assert batch.status == "completed"
    assert (batch.request_counts.completed, batch.request_counts.failed) == (1, 1)
    assert sorted(answers(client, batch.output_file_id)) == ["good"]
    [refused] = answers(client, batch.error_file_id).values()
    assert refused["custom_id"] == "bad" and refused["response"]["status_code"] == 400
    assert refused["response"]["body"]["error"]["param"] == "max_tokens"


def test_the_sdk_cancels_a_running_batch(client):
    content = b"".join(line(f"l{i}", max_tokens=400) for i in range(20))
    uploaded = client.files.create(file=("in.jsonl", content), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    cancelling = client.batches.cancel(batch.id)
    assert cancelling.status in ("cancelling", "cancelled")
    done = wait(client, cancelling)
    assert done.status == "cancelled" and done.cancelled_at
    assert done.request_counts.completed < 20
