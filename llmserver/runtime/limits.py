"""What admission checks a request against besides its key: the sliding-minute windows (RPM and
TPM) and the quota and budget holds, in this process's memory or, with a Redis URL, shared by
every process of the deployment."""

from __future__ import annotations

from dataclasses import dataclass

from llmserver.conf import GatewaySettings
from llmserver.runtime.ratelimit import SlidingWindow, sliding_window
from llmserver.runtime.reservations import Reservations, reservations


@dataclass(slots=True)
class AdmissionLimits:
    rates: SlidingWindow
    holds: Reservations

    @classmethod
    def from_settings(cls, conf: GatewaySettings) -> AdmissionLimits:
        prefix, url = conf.cluster_prefix, conf.rate_limit_redis_url
        return cls(
            sliding_window(url, f"{prefix}:ratelimit:"),
            reservations(url, f"{prefix}:reservations:"),
        )

    async def aclose(self) -> None:
        await self.rates.aclose()
        await self.holds.aclose()
