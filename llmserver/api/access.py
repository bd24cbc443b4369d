"""Who may read /metrics: it names every tenant and counts their tokens.

Two optional locks, set by `METRICS_TOKEN` and `METRICS_ALLOW`; each one that is set must pass.
The client address is the TCP peer daphne reports, so behind a reverse proxy the allow-list sees
the proxy: use the token there, or have the proxy restrict the path.
"""

from __future__ import annotations

import hmac
import ipaddress
from collections.abc import Iterable, Mapping
from typing import Any

from llmserver.api.auth import bearer
from llmserver.conf import GatewaySettings
from llmserver.wire.errors import ApiError, client_not_allowed, unauthorized


def _client_allowed(client: Any, networks: Iterable[str]) -> bool:
    if not client:
        return False
    try:
        address = ipaddress.ip_address(str(client[0]))
    except ValueError:
        return False  # a Unix socket peer has no address to match
    return any(address in ipaddress.ip_network(net) for net in networks)


def metrics_refusal(conf: GatewaySettings, scope: Mapping[str, Any]) -> ApiError | None:
    """None if this request may read /metrics, else the refusal to send."""
    if conf.metrics_allow and not _client_allowed(scope.get("client"), conf.metrics_allow):
        return client_not_allowed()
    if conf.metrics_token:
        sent = bearer(scope.get("headers", [])) or ""
        if not hmac.compare_digest(sent.encode(), conf.metrics_token.encode()):
            return unauthorized("Send the metrics token: 'Authorization: Bearer <METRICS_TOKEN>'.")
    return None
