"""What an operator's Prometheus and Grafana read: the gateway's series, the shipped dashboard
and alert rules naming only series it exports, and one JSON access-log line per request."""

from __future__ import annotations

import json
import logging
import re
from datetime import timedelta
from decimal import Decimal
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from tenants.models import CostRule
from tests.api.conftest import MODEL, chat_body, read_all, start, usage_rows

DOCS = Path(__file__).resolve().parents[2] / "docs"
FUNCTIONS = {"sum", "by", "rate", "increase", "histogram_quantile", "max", "le", "without"}


def exported(gateway) -> set[str]:
    names = set()
    for family in text_string_to_metric_families(gateway.telemetry.metrics.render().decode()):
        # A labelled family with no samples yet is still exported: its series appear once used.
        suffixes = {"counter": ["_total"], "histogram": ["_bucket", "_count", "_sum"]}
        names |= {family.name + s for s in suffixes.get(family.type, [""])}
    return names


def series_in(expr: str) -> set[str]:
    expr = re.sub(r"\{[^}]*\}", "", re.sub(r"\[[^\]]*\]", "", expr))
    expr = re.sub(r"by \([^)]*\)", "", expr)
    return {w for w in re.findall(r"[a-z_][a-z0-9_]*", expr) if w.startswith("llmserver_")}


async def test_grafana_dashboard_is_a_dashboard_whose_queries_name_exported_series(gateway, world):
    await read_all(await start(world["alice"], chat_body()))
    dashboard = json.loads((DOCS / "grafana" / "llm-server.json").read_text())
    assert dashboard["title"] and dashboard["panels"]
    names = exported(gateway)
    for panel in dashboard["panels"]:
        assert panel["targets"], panel["title"]
        for target in panel["targets"]:
            used = series_in(target["expr"])
            assert used and used <= names, (panel["title"], used - names)


async def test_alert_rules_name_exported_series(gateway, world):
    await read_all(await start(world["alice"], chat_body()))
    # No YAML parser among the dependencies: the rules file keeps each expr on one line.
    text = (DOCS / "alerts.yml").read_text()
    alerts = re.findall(r"^\s+- alert: (\S+)$", text, re.M)
    exprs = re.findall(r"^\s+expr: (.+)$", text, re.M)
    assert len(alerts) == len(exprs)
    assert set(alerts) >= {
        "LLMServerBackendStale",
        "LLMServerQueueWaitHigh",
        "LLMServerUsageWriterFailing",
    }
    names = exported(gateway)
    for alert, expr in zip(alerts, exprs, strict=True):
        assert series_in(expr) and series_in(expr) <= names, alert


async def test_a_request_shows_in_duration_and_tenant_wait_histograms(gateway, world):
    await read_all(await start(world["alice"], chat_body()))
    text = gateway.telemetry.metrics.render().decode()
    assert 'llmserver_request_duration_seconds_count{band="0",model="demo-llama"} 1.0' in text
    assert 'llmserver_tenant_queue_wait_seconds_count{tenant="acme"} 1.0' in text


async def test_cost_per_tenant_is_exported_as_billed_on_its_usage_rows(gateway, world):
    await sync_to_async(CostRule.objects.create)(
        model=MODEL,
        input_per_million=Decimal("1000"),
        output_per_million=Decimal("4000"),
        effective_from=timezone.now() - timedelta(days=1),
    )
    await read_all(await start(world["alice"], chat_body()))
    await gateway.usage.flush_once()
    [row] = await usage_rows()
    families = text_string_to_metric_families(gateway.telemetry.metrics.render().decode())
    [cost] = [f for f in families if f.name == "llmserver_cost"]
    assert [(s.labels, s.value) for s in cost.samples] == [
        ({"tenant": "acme"}, pytest.approx(float(row["cost"])))
    ]
    assert row["cost"] > 0


async def test_each_request_writes_one_json_access_line_without_secrets_or_prompt(
    gateway, world, caplog
):
    with caplog.at_level(logging.INFO, logger="llmserver.access"):
        _, headers, _ = await read_all(await start(world["alice"], chat_body()))
    lines = [r.getMessage() for r in caplog.records if r.name == "llmserver.access"]
    assert len(lines) == 1
    record = json.loads(lines[0])
    assert record["request_id"] == headers[b"x-request-id"].decode()
    assert (record["tenant"], record["user"], record["status"]) == ("acme", "alice", "ok")
    assert record["completion_tokens"] == 8 and record["duration_ms"] > 0
    assert world["alice"] not in lines[0] and "Tell me something" not in lines[0]
