"""A key revoked by another process stops working in a running gateway within about a second."""

from __future__ import annotations

import time

import httpx
import pytest

from llmserver.testing.processes import Database, start_gateway

pytestmark = pytest.mark.e2e
BODY = {"model": "demo-llama", "max_tokens": 1, "messages": [{"role": "user", "content": "x"}]}


def test_a_key_revoked_from_the_command_line_gets_401_within_a_second(e2e_simulator, tmp_path):
    database = Database(tmp_path)
    gateway = start_gateway(database.url, e2e_simulator.url, quiet=True)
    try:
        auth = {"authorization": f"Bearer {gateway.key('alice')}"}
        with httpx.Client(base_url=gateway.url, headers=auth, timeout=30) as client:
            assert client.post("/v1/chat/completions", json=BODY).status_code == 200
            gateway.manage(
                "shell",
                "-c",
                "from tenants.models import ApiKey; "
                "ApiKey.objects.filter(user='alice').update(revoked=True)",
            )
            revoked_at = time.monotonic()
            statuses = []
            while time.monotonic() - revoked_at < 1.5:
                statuses.append(client.get("/v1/models").status_code)
                if statuses[-1] == 401:
                    break
                time.sleep(0.05)
            assert statuses[-1] == 401 and time.monotonic() - revoked_at < 1.2, statuses
            assert client.post("/v1/chat/completions", json=BODY).status_code == 401
    finally:
        gateway.stop()
        database.drop()
