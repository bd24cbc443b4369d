"""GET /v1/requests/{id}: where a live request stands, for the API key that sent it.

A request the gateway is not running, or one another key sent, is the same 404: a key learns
nothing about requests that are not its own.
"""

from __future__ import annotations

from llmserver.api.auth import authenticate, bearer
from llmserver.api.errors import ApiError
from llmserver.api.http import JsonHttpConsumer
from llmserver.runtime.gateway import get_gateway


def request_not_found(request_id: str) -> ApiError:
    return ApiError(
        404, f"No request {request_id!r} is queued or running for this key.", code="not_found"
    )


class RequestStatusConsumer(JsonHttpConsumer):
    async def handle(self, body: bytes) -> None:
        route: dict[str, dict[str, str]] = self.scope.get("url_route", {})  # type: ignore[assignment]  # Channels' URLRouter adds it
        request_id = route.get("kwargs", {}).get("request_id", "")
        try:
            refusal = self.method_allowed()
            if refusal:
                raise refusal
            gw = await get_gateway()
            key = await authenticate(gw, bearer(self.scope.get("headers", [])))
            where = gw.scheduler.position(request_id)
            if gw.owners.get(request_id) != key.key_id or where is None:
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
            eta = gw.service_times.estimate(where.model, where.position, where.running)
            data["eta_s"] = round(eta, 1)
        await self.send_json(200, data)
