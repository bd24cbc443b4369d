"""The official `openai` package's Batch API calls against a real daphne serving the gateway:
upload, create, poll until done, read the output."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

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


def line(custom_id: str) -> bytes:
    body = {"model": MODEL, "max_tokens": 3, "messages": [{"role": "user", "content": custom_id}]}
    request = {
        "custom_id": custom_id,
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": body,
    }
    return json.dumps(request).encode() + b"\n"


def test_the_sdk_runs_a_batch_from_upload_to_output(batch_gateway):
    import openai

    with openai.OpenAI(
        base_url=batch_gateway.url + "/v1", api_key=batch_gateway.key("alice"), max_retries=0
    ) as client:
        uploaded = client.files.create(file=("in.jsonl", line("a") + line("b")), purpose="batch")
        assert uploaded.purpose == "batch" and uploaded.bytes > 0
        batch = client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        )
        deadline = time.monotonic() + 30
        while batch.status not in ("completed", "failed", "expired", "cancelled"):
            assert time.monotonic() < deadline, batch
            time.sleep(0.1)
            batch = client.batches.retrieve(batch.id)
        assert batch.status == "completed" and batch.request_counts.completed == 2
        assert batch.id in [b.id for b in client.batches.list()]
        output = client.files.content(batch.output_file_id).text
        answers = {json.loads(text)["custom_id"]: json.loads(text) for text in output.splitlines()}
        assert sorted(answers) == ["a", "b"]
        assert all(a["response"]["status_code"] == 200 for a in answers.values())
        assert client.files.delete(uploaded.id).deleted
