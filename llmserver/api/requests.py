"""GET /v1/requests/{id}: where a live request stands, for a key that sees it: one of its user's
keys, or its tenant administrator's (`tenants/visibility.py`).

A request the gateway is not running, or one the key may not see, is the same 404: a key learns
nothing about requests that are not its own.
"""

from __future__ import annotations

from llmserver.api.http import JsonHttpConsumer
from llmserver.wire.errors import ApiError, request_not_found


class RequestStatusConsumer(JsonHttpConsumer):
    async def handle(self, body: bytes) -> None:
        request_id = self.route_arg("request_id")
        try:
            port, key = await self.authorized()
            where = port.scheduler.position(request_id)
            owner = port.inflight.owner(request_id)
            if owner is None or not key.sees(*owner) or where is None:
                raise request_not_found(request_id)
        except ApiError as exc:
            await self.send_error(exc)
            return
        data: dict[str, object] = {
            "id": request_id,
            "object": "request.status",
            "status": where.state,
            "model": where.model,
            "band": where.band,
        }
        if where.state == "queued":
            data["position"] = where.position
            eta = port.estimates.wait(where.model, where.position, where.running)
            data["eta_s"] = round(eta, 1)
        await self.send_json(200, data)
