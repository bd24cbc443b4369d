"""The official `openai` package against a real daphne serving the gateway."""

from __future__ import annotations

import httpx
import openai
import pytest

pytestmark = pytest.mark.e2e
MODEL = "demo-llama"
MESSAGES = [{"role": "user", "content": "Say something"}]


def test_a_streaming_chat_arrives_chunk_by_chunk_with_usage(client):
    chunks = list(
        client.chat.completions.create(
            model=MODEL,
            messages=MESSAGES,
            max_tokens=5,
            stream=True,
            stream_options={"include_usage": True},
        )
    )
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert len([c for c in chunks if c.choices]) >= 5 and text
    assert chunks[-1].usage.completion_tokens == 5
    assert all(c.model == MODEL for c in chunks)


def test_a_non_streaming_chat_is_one_response(client):
    response = client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=4)
    assert response.choices[0].message.content and response.usage.completion_tokens == 4


def test_a_text_completion_works(client):
    response = client.completions.create(model=MODEL, prompt="Once upon a time", max_tokens=3)
    assert response.choices[0].text and response.usage.completion_tokens == 3


def test_the_model_list_shows_what_the_key_may_use(client):
    assert [m.id for m in client.models.list()] == ["demo-embed", MODEL]


def test_a_bad_key_is_an_authentication_error(e2e_gateway):
    bad = openai.OpenAI(base_url=e2e_gateway.url + "/v1", api_key="sk-llms-nope", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.models.list()


def test_an_unknown_model_is_not_found(client):
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-17", messages=MESSAGES)
    assert info.value.body["code"] == "model_not_found"


def test_a_bad_request_is_a_bad_request_error(client):
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=-3)
    assert info.value.body["param"] == "max_tokens"


def test_a_model_the_key_may_not_use_is_a_permission_error(e2e_gateway):
    import json

    out = json.loads(
        e2e_gateway.manage("create_api_key", "demo", "dora", "--models", "other-*", "--json")
    )
    limited = openai.OpenAI(base_url=e2e_gateway.url + "/v1", api_key=out["key"], max_retries=0)
    with pytest.raises(openai.PermissionDeniedError):
        limited.chat.completions.create(model=MODEL, messages=MESSAGES)


def test_an_exceeded_quota_is_a_rate_limit_error_with_retry_after(e2e_gateway):
    import json

    e2e_gateway.manage("create_tenant", "tiny", "Tiny", "--tier", "interactive")
    out = json.loads(e2e_gateway.manage("create_api_key", "tiny", "tom", "--json"))
    e2e_gateway.manage(
        "shell",
        "-c",
        "from tenants.models import QuotaRule, Tenant; QuotaRule.objects.create(tenant=Tenant.objects.get(slug='tiny'), window='day', metric='requests', limit=1)",
    )
    tiny = openai.OpenAI(base_url=e2e_gateway.url + "/v1", api_key=out["key"], max_retries=0)
    tiny.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)
    import time

    deadline = time.monotonic() + 10
    while True:
        try:
            tiny.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)
        except openai.RateLimitError as exc:
            assert int(exc.response.headers["retry-after"]) >= 1
            assert exc.body["code"] == "quota_exceeded"
            break
        assert time.monotonic() < deadline, "the quota was never enforced"
        time.sleep(0.2)


MALFORMED = [
    ("not json", {"content-type": "application/json"}, b"{nope", 400),
    ("wrong content type", {"content-type": "text/plain"}, b"{}", 415),
    ("wrong types", {"content-type": "application/json"}, b'{"model": 1, "messages": "x"}', 400),
    ("missing fields", {"content-type": "application/json"}, b"{}", 400),
    (
        "huge max_tokens",
        {"content-type": "application/json"},
        b'{"model": "demo-llama", "max_tokens": 99999999, "messages": [{"role": "user", "content": "x"}]}',
        400,
    ),
    (
        "oversized body",
        {"content-type": "application/json"},
        b'{"model": "' + b"x" * 2_000_000 + b'"}',
        413,
    ),
]


@pytest.mark.parametrize(
    ("name", "headers", "body", "status"), MALFORMED, ids=[m[0] for m in MALFORMED]
)
def test_malformed_input_gets_a_4xx_in_openais_shape_and_the_server_keeps_serving(
    e2e_gateway, name, headers, body, status
):
    key = e2e_gateway.key("alice")
    response = httpx.post(
        e2e_gateway.url + "/v1/chat/completions",
        content=body,
        headers={"authorization": f"Bearer {key}", **headers},
        timeout=30,
    )
    assert response.status_code == status
    error = response.json()["error"]
    assert set(error) == {"message", "type", "param", "code"} and error["message"]
    assert httpx.get(e2e_gateway.url + "/healthz", timeout=5).status_code == 200


def test_responses_carry_the_request_id_and_the_time_queued(e2e_gateway):
    response = httpx.post(
        e2e_gateway.url + "/v1/chat/completions",
        json={"model": MODEL, "messages": MESSAGES, "max_tokens": 2},
        headers={"authorization": f"Bearer {e2e_gateway.key('alice')}"},
        timeout=30,
    )
    assert response.status_code == 200
    assert response.headers["x-request-id"].startswith("chatcmpl-")
    assert float(response.headers["x-queue-time-ms"]) >= 0


def test_the_gateway_exposes_its_own_metrics(e2e_gateway, client):
    client.chat.completions.create(model=MODEL, messages=MESSAGES, max_tokens=2)
    text = httpx.get(e2e_gateway.url + "/metrics", timeout=5).text
    assert 'llmserver_requests_total{band="0",model="demo-llama",status="ok"}' in text
    assert "llmserver_gate_open" in text and "llmserver_queue_wait_seconds_bucket" in text


def test_readyz_reports_a_usable_backend(e2e_gateway):
    response = httpx.get(e2e_gateway.url + "/readyz", timeout=5)
    assert response.status_code == 200 and response.json()["backends"] == ["simulator"]
    assert response.json()["scheduler"] == "local"  # one process, no Redis involved
