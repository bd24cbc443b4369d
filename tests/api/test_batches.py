"""/v1/batches: a batch's lines run through the gateway's own pipeline on the batch band, as the
key that created it, with an output file, progress on GET, cancel, and resuming after a restart."""

from __future__ import annotations

import asyncio
import json
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone

from llmserver.process import current_batch_runner, get_gateway, reset_gateway
from scheduling import BATCH
from tenants.models import (
    ApiKey,
    AppType,
    Band,
    Batch,
    QuotaRule,
    Tenant,
    Tier,
    UsageRecord,
)
from tests.api.batch_helpers import (
    call_json,
    chat_line,
    content_lines,
    create_batch,
    get_batch,
    jsonl,
    upload,
    wait_batch,
)
from tests.api.conftest import MODEL, chat_body, read_all, start, usage_rows, wait_for

CHAT = "/v1/chat/completions"


@pytest.fixture(autouse=True)
def batch_settings(world: dict[str, Any], settings: Any, tmp_path: Path) -> None:
    settings.LLMSERVER = {
        **settings.LLMSERVER,
        "FILES_DIR": str(tmp_path / "files"),
        "BATCH_POLL_INTERVAL": 0.05,
    }
    # The batch band's gate, as an operator sets it: batch work only on an empty engine queue.
    Tier.objects.create(name="batch", band=Band.BATCH, gate_max_waiting=0, gate_max_tpot_ms=None)


@pytest.fixture
def charlie(world: dict[str, Any]) -> str:
    globex = Tenant.objects.create(name="Globex", slug="globex", default_tier=world["tier"])
    _, secret = ApiKey.objects.create_key(tenant=globex, user="charlie", app_type=AppType.CHAT)
    return secret


@pytest.fixture
def bulk(world: dict[str, Any]) -> str:
    """A key of a roomy interactive tier: eight lines of its batches in flight at once."""
    roomy = Tier.objects.create(
        name="roomy",
        band=Band.INTERACTIVE,
        max_concurrent_per_user=8,
        max_queued_per_user=16,
        gate_max_waiting=3,
        gate_max_tpot_ms=None,
    )
    _, secret = ApiKey.objects.create_key(
        tenant=world["tenant"], user="bulk", tier_override=roomy, app_type=AppType.CHAT
    )
    return secret


async def ok_rows(gateway: Any) -> list[dict[str, Any]]:
    await gateway.usage.flush_once()
    return [r for r in await usage_rows() if r["status"] == "ok"]


async def test_a_batch_completes_with_one_answer_per_custom_id(gateway, world):
    batch = await create_batch(world["alice"], [chat_line(c) for c in "abc"])
    assert batch["object"] == "batch" and batch["status"] == "validating"
    done = await wait_batch(world["alice"], batch["id"])
    assert done["status"] == "completed" and done["error_file_id"] is None
    assert done["request_counts"] == {"total": 3, "completed": 3, "failed": 0}
    assert done["completed_at"] >= done["in_progress_at"] >= done["created_at"]
    lines = await content_lines(world["alice"], done["output_file_id"])
    assert sorted(line["custom_id"] for line in lines) == ["a", "b", "c"]
    for line in lines:
        assert line["id"].startswith("batch_req_") and line["error"] is None
        assert line["response"]["status_code"] == 200
        assert line["response"]["body"]["object"] == "chat.completion"
        assert line["response"]["body"]["choices"][0]["message"]["content"]


async def test_each_line_is_one_usage_row_of_the_key_with_its_endpoint(gateway, world):
    batch = await create_batch(world["alice"], [chat_line(c) for c in "abc"])
    done = await wait_batch(world["alice"], batch["id"])
    lines = await content_lines(world["alice"], done["output_file_id"])
    rows = await ok_rows(gateway)
    alice = await sync_to_async(ApiKey.objects.get)(user="alice")
    assert sorted(r["request_id"] for r in rows) == sorted(
        line["response"]["request_id"] for line in lines
    )
    assert {(r["api_key_id"], r["user"], r["endpoint"], r["model"]) for r in rows} == {
        (alice.pk, "alice", "chat", MODEL)
    }
    usage = done["usage"]
    assert usage["input_tokens"] == sum(r["prompt_tokens"] for r in rows)
    assert usage["output_tokens"] == sum(r["completion_tokens"] for r in rows) == 3 * 4


async def test_a_completions_batch_records_the_completions_endpoint(gateway, world):
    line = {
        "custom_id": "t",
        "method": "POST",
        "url": "/v1/completions",
        "body": {"model": MODEL, "prompt": "Once upon a time", "max_tokens": 3},
    }
    batch = await create_batch(world["alice"], [line], endpoint="/v1/completions")
    done = await wait_batch(world["alice"], batch["id"])
    [answer] = await content_lines(world["alice"], done["output_file_id"])
    assert answer["response"]["body"]["object"] == "text_completion"
    [row] = await ok_rows(gateway)
    assert row["endpoint"] == "completions"


async def test_batch_lines_run_on_the_batch_band_whatever_the_keys_tier(gateway, world):
    assert world["tier"].band == Band.INTERACTIVE
    batch = await create_batch(world["alice"], [chat_line(c) for c in "ab"])
    await wait_batch(world["alice"], batch["id"])
    assert {r["band"] for r in await ok_rows(gateway)} == {BATCH}


async def test_an_interactive_request_is_served_before_queued_batch_lines(gateway, world, bulk):
    batch = await create_batch(bulk, [chat_line(f"l{i}", max_tokens=120) for i in range(12)])

    def flooded() -> bool:
        lanes = [q for q in gateway.snapshot().queues if q.band == BATCH]
        return any(q.depth >= 4 and q.in_flight >= 1 for q in lanes)

    await wait_for(flooded, 10.0)
    request = await start(world["alice"], chat_body(max_tokens=4, stream=False))
    assert (await read_all(request))[0] == 200
    assert (await get_batch(bulk, batch["id"]))["status"] == "in_progress"
    await wait_batch(bulk, batch["id"])
    await gateway.usage.flush_once()
    rows = await usage_rows()
    [mine] = [r for r in rows if r["user"] == "alice"]
    assert mine["band"] == Band.INTERACTIVE
    assert (mine["dispatched_at"] - mine["queued_at"]).total_seconds() < 1.0
    # Batch lines that were waiting when it came were sent after it.
    overtaken = [
        r
        for r in rows
        if r["user"] == "bulk"
        and r["queued_at"] < mine["queued_at"]
        and r["dispatched_at"] > mine["dispatched_at"]
    ]
    assert len(overtaken) >= 2


async def test_invalid_lines_fail_the_batch_at_validation(gateway, world):
    lines = [
        chat_line("a"),
        chat_line("a"),
        chat_line("b", method="GET"),
        chat_line("c", url="/v1/embeddings"),
        {"custom_id": "d", "method": "POST", "url": CHAT, "body": "hello"},
    ]
    batch = await create_batch(world["alice"], lines)
    failed = await wait_batch(world["alice"], batch["id"])
    assert failed["status"] == "failed" and failed["failed_at"]
    errors = [(e["line"], e["code"]) for e in failed["errors"]["data"]]
    assert errors == [
        (2, "duplicate_custom_id"),
        (3, "invalid_method"),
        (4, "invalid_url"),
        (5, "invalid_request"),
    ]
    assert failed["output_file_id"] is None and failed["request_counts"]["total"] == 0
    await gateway.usage.flush_once()
    assert await usage_rows() == []


async def test_a_batch_for_a_model_no_route_serves_fails_at_validation(gateway, world):
    line = chat_line("a")
    line["body"]["model"] = "gpt-17"
    failed = await wait_batch(world["alice"], (await create_batch(world["alice"], [line]))["id"])
    assert failed["status"] == "failed"
    assert [e["code"] for e in failed["errors"]["data"]] == ["model_not_found"]


async def test_a_model_the_key_may_not_use_fails_the_batch_naming_the_line(gateway, world):
    _, narrow = await sync_to_async(ApiKey.objects.create_key)(
        tenant=world["tenant"], user="alice", allowed_models="other-*"
    )
    status, uploaded = await upload(narrow, b"\n" + jsonl([chat_line("a"), chat_line("b")]))
    assert status == 200, uploaded
    request = {"input_file_id": uploaded["id"], "endpoint": CHAT, "completion_window": "24h"}
    status, batch = await call_json(
        "POST",
        "/v1/batches",
        narrow,
        body=json.dumps(request).encode(),
        content_type="application/json",
    )
    failed = await wait_batch(narrow, batch["id"])
    [error] = failed["errors"]["data"]
    assert (error["code"], error["line"], error["param"]) == ("model_not_found", 2, "body.model")


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"endpoint": "/v1/messages"}, "endpoint"),
        ({"completion_window": "1h"}, "completion_window"),
        ({"metadata": {"k": 1}}, "metadata"),
        ({"input_file_id": None}, "input_file_id"),
    ],
)
async def test_a_bad_create_request_is_refused(gateway, world, change, param):
    _, uploaded = await upload(world["alice"], jsonl([chat_line("a")]))
    request = {"input_file_id": uploaded["id"], "endpoint": CHAT, "completion_window": "24h"}
    body = json.dumps({**request, **change}).encode()
    status, error = await call_json(
        "POST", "/v1/batches", world["alice"], body=body, content_type="application/json"
    )
    assert status == 400 and error["error"]["param"] == param
    assert await sync_to_async(Batch.objects.count)() == 0


async def test_a_batch_of_another_tenants_file_is_refused_with_404(gateway, world, charlie):
    _, uploaded = await upload(world["alice"], jsonl([chat_line("a")]))
    request = {"input_file_id": uploaded["id"], "endpoint": CHAT, "completion_window": "24h"}
    status, error = await call_json(
        "POST",
        "/v1/batches",
        charlie,
        body=json.dumps(request).encode(),
        content_type="application/json",
    )
    assert status == 404 and error["error"]["code"] == "not_found"


async def test_another_tenant_gets_404_for_a_batch_and_lists_none(gateway, world, charlie):
    batch = await create_batch(world["alice"], [chat_line("a")])
    status, _ = await call_json("GET", f"/v1/batches/{batch['id']}", charlie)
    assert status == 404
    status, _ = await call_json("POST", f"/v1/batches/{batch['id']}/cancel", charlie)
    assert status == 404
    _, listed = await call_json("GET", "/v1/batches", charlie)
    assert listed["data"] == []


async def test_the_list_is_newest_first_and_pages(gateway, world):
    ids = [(await create_batch(world["alice"], [chat_line("a")]))["id"] for _ in range(3)]
    _, page = await call_json("GET", "/v1/batches", world["alice"], query="limit=2")
    assert [b["id"] for b in page["data"]] == ids[:0:-1] and page["has_more"] is True
    _, rest = await call_json(
        "GET", "/v1/batches", world["alice"], query=f"limit=2&after={page['last_id']}"
    )
    assert [b["id"] for b in rest["data"]] == ids[:1] and rest["has_more"] is False


async def test_a_cancelled_batch_sends_no_more_lines_and_ends_cancelled(gateway, world):
    lines = [chat_line(f"l{i}", max_tokens=150) for i in range(10)]
    batch = await create_batch(world["alice"], lines)
    await wait_batch(world["alice"], batch["id"], lambda b: b["request_counts"]["completed"] >= 1)
    status, cancelling = await call_json(
        "POST", f"/v1/batches/{batch['id']}/cancel", world["alice"]
    )
    assert status == 200 and cancelling["status"] in ("cancelling", "cancelled")
    done = await wait_batch(world["alice"], batch["id"])
    assert done["status"] == "cancelled" and done["cancelled_at"]
    completed = done["request_counts"]["completed"]
    assert 1 <= completed < 10 and done["request_counts"]["failed"] == 0
    assert len(await content_lines(world["alice"], done["output_file_id"])) == completed
    # The lines in flight ended (answered and recorded); none was sent after the cancel.
    assert len(await ok_rows(gateway)) == completed


async def test_cancelling_an_ended_batch_is_refused_with_409(gateway, world):
    batch = await create_batch(world["alice"], [chat_line("a")])
    await wait_batch(world["alice"], batch["id"])
    status, error = await call_json("POST", f"/v1/batches/{batch['id']}/cancel", world["alice"])
    assert status == 409 and "completed" in error["error"]["message"]


async def test_a_batch_resumes_after_a_restart_without_sending_answered_lines_again(gateway, world):
    lines = [chat_line(f"l{i}", max_tokens=150) for i in range(8)]
    batch = await create_batch(world["alice"], lines)
    await wait_batch(world["alice"], batch["id"], lambda b: b["request_counts"]["completed"] >= 2)
    await reset_gateway()
    stopped = await sync_to_async(Batch.objects.get)(pk=batch["id"])
    assert stopped.status == "in_progress" and stopped.runner == ""  # released at once
    answered_before = stopped.completed
    assert 2 <= answered_before < 8
    await get_gateway()
    done = await wait_batch(world["alice"], batch["id"])
    assert done["status"] == "completed"
    assert done["request_counts"] == {"total": 8, "completed": 8, "failed": 0}
    output = await content_lines(world["alice"], done["output_file_id"])
    assert sorted(line["custom_id"] for line in output) == sorted(f"l{i}" for i in range(8))
    # Eight answers, eight billed: the lines answered before the restart were not sent again
    # (a line cut in flight by the restart is billed as cancelled, then answered once).
    assert len(await ok_rows(await get_gateway())) == 8


async def test_a_line_refused_for_a_full_queue_waits_and_is_answered(gateway, world):
    # Alice's tier runs one request at a time and queues two: three of her own fill it.
    streams = [await start(world["alice"], chat_body(max_tokens=200)) for _ in range(3)]
    batch = await create_batch(world["alice"], [chat_line("a"), chat_line("b")])
    for comm in streams:
        assert (await read_all(comm))[0] == 200
    done = await wait_batch(world["alice"], batch["id"])
    assert done["request_counts"] == {"total": 2, "completed": 2, "failed": 0}
    await gateway.usage.flush_once()
    refused = [r for r in await usage_rows() if r["band"] == BATCH and r["status"] == "rejected"]
    assert refused and {r["error_type"] for r in refused} == {"queue_full"}


async def served_earlier(tenant: Any, cost: Decimal = Decimal(0)) -> None:
    """A usage row of alice's from earlier today, as if served before the batch."""
    now = timezone.now()
    await sync_to_async(UsageRecord.objects.create)(
        request_id="earlier-today",
        tenant=tenant,
        user="alice",
        model=MODEL,
        band=0,
        queued_at=now,
        finished_at=now,
        status="ok",
        cost=cost,
    )


async def the_one_line_is_refused(key: str, code: str) -> None:
    """A batch of one line completes with that line in its error file, refused with 429 `code`."""
    done = await wait_batch(key, (await create_batch(key, [chat_line("a")]))["id"])
    assert done["status"] == "completed" and done["output_file_id"] is None
    assert done["request_counts"] == {"total": 1, "completed": 0, "failed": 1}
    [line] = await content_lines(key, done["error_file_id"])
    assert line["custom_id"] == "a" and line["response"]["status_code"] == 429
    assert line["response"]["body"]["error"]["code"] == code


async def test_a_line_refused_by_the_budget_fails_with_its_error(gateway, world):
    tenant = world["tenant"]
    tenant.monthly_budget = Decimal("1.00")
    await sync_to_async(tenant.save)()
    await served_earlier(tenant, cost=Decimal("1.50"))
    gateway.keys.clear()
    await the_one_line_is_refused(world["alice"], "budget_exceeded")


async def test_a_line_refused_by_the_quota_fails_with_its_error(gateway, world):
    tenant = world["tenant"]
    await sync_to_async(QuotaRule.objects.create)(
        tenant=tenant, window="day", metric="requests", limit=1
    )
    await served_earlier(tenant)
    await gateway.reload_once()
    gateway.keys.clear()
    await the_one_line_is_refused(world["alice"], "quota_exceeded")


async def test_a_batch_past_its_window_expires_with_each_line_batch_expired(gateway, world):
    runner = current_batch_runner()
    assert runner is not None
    runner.stopping = True  # no claim before its window is made to have passed
    batch = await create_batch(world["alice"], [chat_line(c) for c in "ab"])
    await sync_to_async(Batch.objects.filter(pk=batch["id"]).update)(
        expires_at=timezone.now() - timezone.timedelta(seconds=1)
    )
    runner.stopping = False
    done = await wait_batch(world["alice"], batch["id"])
    assert done["status"] == "expired" and done["expired_at"]
    lines = await content_lines(world["alice"], done["error_file_id"])
    assert {line["error"]["code"] for line in lines} == {"batch_expired"}
    assert done["request_counts"]["completed"] + done["request_counts"]["failed"] == 2


async def test_two_processes_never_claim_the_same_batch(gateway, world):
    from llmserver.batches import claims

    runner = current_batch_runner()
    assert runner is not None
    await runner.stop()  # this process's runner out of the way
    batch = await create_batch(world["alice"], [chat_line("a")])
    first = await sync_to_async(claims.claim)(batch["id"], "one", 30.0)
    second = await sync_to_async(claims.claim)(batch["id"], "two", 30.0)
    assert first is not None and second is None


async def test_a_stop_during_a_look_for_work_starts_no_run_and_releases_its_claim(
    gateway, world, monkeypatch
):
    """The stop cut the runs it saw; a batch claimed after it began is given back at once, not
    run past the gateway's stop."""
    from llmserver.batches import claims
    from llmserver.batches.runner import BatchRunner

    runner = current_batch_runner()
    assert runner is not None
    await runner.stop()  # this process's runner out of the way
    batch = await create_batch(world["alice"], [chat_line("a")])
    looking = BatchRunner(gateway)
    claim = claims.claim

    def claim_as_the_stop_begins(*args: Any) -> Any:
        looking.stopping = True
        return claim(*args)

    monkeypatch.setattr(claims, "claim", claim_as_the_stop_begins)
    assert await looking.poll_once() == [] and looking.runs == {}
    runner_token = await sync_to_async(
        Batch.objects.filter(pk=batch["id"]).values_list("runner", flat=True).get
    )()
    assert runner_token == ""


async def test_the_openai_sdk_uploads_creates_and_retrieves_a_batch(gateway, world):
    import httpx
    import openai

    from llmserver.asgi import application

    transport = httpx.ASGITransport(app=application)
    async with openai.AsyncOpenAI(
        base_url="http://testserver/v1",
        api_key=world["alice"],
        http_client=httpx.AsyncClient(transport=transport, base_url="http://testserver"),
        max_retries=0,
    ) as client:
        uploaded = await client.files.create(
            file=("in.jsonl", jsonl([chat_line("a"), chat_line("b")])), purpose="batch"
        )
        created = await client.batches.create(
            input_file_id=uploaded.id, endpoint=CHAT, completion_window="24h"
        )
        for _ in range(400):
            got = await client.batches.retrieve(created.id)
            if got.status == "completed":
                break
            await asyncio.sleep(0.05)
        assert got.status == "completed" and got.request_counts.completed == 2
        assert got.output_file_id is not None
        output = (await client.files.content(got.output_file_id)).text
        assert sorted(json.loads(line)["custom_id"] for line in output.splitlines()) == ["a", "b"]


def test_a_torn_last_answer_is_cut_and_its_line_counts_as_not_done(tmp_path):
    from llmserver.batches.results import ResultFiles
    from llmserver.batches.storage import FileStore

    results = ResultFiles(FileStore(tmp_path), "batch_x")
    output = tmp_path / "batches" / "batch_x" / "output.jsonl"
    output.parent.mkdir(parents=True)
    whole = json.dumps({"custom_id": "a", "response": {"body": {"usage": {"prompt_tokens": 3}}}})
    output.write_text(whole + "\n" + '{"custom_id": "b", "resp')
    results.recover()
    assert results.done == {"a"} and (results.completed, results.input_tokens) == (1, 3)
    assert output.read_text() == whole + "\n"
