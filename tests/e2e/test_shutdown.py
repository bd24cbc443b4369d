"""Usage records still queued in memory are written when daphne shuts down."""

from __future__ import annotations

import json
import signal

import httpx
import pytest

from llmserver.testing.processes import Database, start_gateway

pytestmark = pytest.mark.e2e


def test_pending_usage_is_flushed_on_shutdown(e2e_simulator, tmp_path):
    database = Database(tmp_path)
    # A flush interval far longer than the test: only the shutdown flush can write the row.
    gateway = start_gateway(database.url, e2e_simulator.url, {"USAGE_FLUSH_INTERVAL": "3600"})
    try:
        response = httpx.post(
            gateway.url + "/v1/chat/completions",
            json={
                "model": "demo-llama",
                "max_tokens": 2,
                "messages": [{"role": "user", "content": "x"}],
            },
            headers={"authorization": f"Bearer {gateway.key('alice')}"},
            timeout=30,
        )
        assert response.status_code == 200
        request_id = response.headers["x-request-id"]
        gateway.process.send_signal(signal.SIGTERM)
        gateway.process.wait(timeout=20)
        out = gateway.manage(
            "shell",
            "-c",
            "import json; from tenants.models import UsageRecord; "
            "print(json.dumps(list(UsageRecord.objects.values_list('request_id', 'status'))))",
        )
        rows = json.loads(out.strip().splitlines()[-1])
        assert rows == [[request_id, "ok"]]
    finally:
        gateway.stop()
        database.drop()
