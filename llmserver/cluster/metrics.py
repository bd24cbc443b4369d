"""A cluster member's own Prometheus series, read at scrape time: whether it leads, whether it
can reach Redis, its epoch, and the stale grants it refused. `sum(llmserver_cluster_leader)`
over the processes should be 1; 0 for longer than a lease means no process leads."""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

if TYPE_CHECKING:
    from llmserver.cluster.node import ClusterScheduler


class ClusterCollector(Collector):
    def __init__(self, member: ClusterScheduler) -> None:
        self._member = member

    def collect(self) -> Iterator[Metric]:
        member = self._member
        yield GaugeMetricFamily(
            "llmserver_cluster_leader",
            "1 while this process leads the cluster's scheduler.",
            value=float(member.leading),
        )
        yield GaugeMetricFamily(
            "llmserver_cluster_redis_up",
            "1 while this process reaches the cluster's Redis.",
            value=float(member.relay.available),
        )
        yield GaugeMetricFamily(
            "llmserver_cluster_epoch",
            "The newest leader epoch (fencing token) this process has seen.",
            value=float(member.relay.epoch),
        )
        yield CounterMetricFamily(
            "llmserver_cluster_stale_grants_refused",
            "Grants refused because they came from a deposed leader's epoch.",
            value=member.relay.refused,
        )
