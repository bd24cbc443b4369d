"""A member says on /metrics whether it leads, reaches Redis, and which epoch it has seen."""

from __future__ import annotations

from cluster_helpers import needs_redis, node, until
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from llmserver.cluster.metrics import ClusterCollector

pytestmark = needs_redis


async def test_a_leading_member_reports_itself_as_leader(prefix: str) -> None:
    member = node(prefix)
    registry = CollectorRegistry()
    registry.register(ClusterCollector(member))
    await member.start()
    try:
        await until(lambda: member.leading and member.relay.epoch == member.lease.epoch)
        text = generate_latest(registry).decode()
        values = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
        assert values["llmserver_cluster_leader"] == 1.0
        assert values["llmserver_cluster_redis_up"] == 1.0
        assert values["llmserver_cluster_epoch"] == float(member.lease.epoch)
    finally:
        await member.stop()
