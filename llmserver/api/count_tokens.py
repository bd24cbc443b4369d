"""POST /v1/messages/count_tokens: Anthropic's token count (the anthropic SDK's
`client.messages.count_tokens`), passed to a backend that serves the model's Messages API.

vLLM 0.32 serves it beside /v1/messages (`vllm/entrypoints/anthropic/api_router.py`): the
messages are rendered and tokenized, nothing reaches the engine, and the answer is
`{"input_tokens": N, "context_management": {"original_input_tokens": N}}`
(`AnthropicServingMessages.count_tokens` in `anthropic/serving.py`). So it is not queued: a
fair queue orders work on the engine's batch, and waiting behind generations for a tokenizer's
answer would only delay the client. The gateway checks what it checks of every request (the
key, the model it may use, the key's and tenant's requests per minute, draining) and passes the
body on, as it passes its own `/tokenize` calls (`llmserver/backends/prompt_tokens.py`). Nothing
is generated, so nothing is billed: no usage row.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from llmserver.api.auth import authenticate, bearer
from llmserver.api.http import MessagesConsumer, header
from llmserver.backends.upstream import BackendError, UpstreamClient
from llmserver.pipeline.admission import check_rates
from llmserver.pipeline.dispatch import as_api_error
from llmserver.process import get_gateway
from llmserver.wire.errors import (
    ApiError,
    endpoint_not_served,
    model_not_allowed,
    model_not_found,
    no_backend,
    shutting_down,
)
from llmserver.wire.validation import GATEWAY_OWNED, check_model, parse_json
from tenants.endpoints import Endpoint

PATH = "/v1/messages/count_tokens"


def _candidates(pool: Mapping[str, str], usable: set[str]) -> list[str]:
    """The pool's backends, the usable ones (healthy, fresh metrics) first."""
    return sorted(pool, key=lambda name: (name not in usable, name))


class CountTokensConsumer(MessagesConsumer):
    """Errors in Anthropic's shape, `x-api-key` accepted, as on /v1/messages."""

    async def serve(self, raw: bytes, request_id: str) -> None:
        try:
            refusal = self.method_allowed()
            if refusal:
                raise refusal
            gw = await get_gateway()
            if gw.inflight.draining:
                raise shutting_down()
            key = await authenticate(gw.keys, bearer(self.scope.get("headers", [])))
            data = parse_json(raw, header(self.scope, b"content-type"))
            model = check_model(data)
            pool = gw.pool(model, Endpoint.MESSAGES)
            if pool is None:
                raise model_not_found(model)
            if not key.allows_model(model):
                raise model_not_allowed(model)
            if not pool:
                raise endpoint_not_served(model, Endpoint.MESSAGES)
            headers = await check_rates(gw.limits.rates, key, 0)
            body = {k: v for k, v in data.items() if k not in GATEWAY_OWNED}
            usable = {b.name for b in gw.snapshot().backends if b.usable}
            answer = await self._count(
                gw.backends.find, _candidates(pool, usable), pool, body, request_id
            )
        except ApiError as exc:
            await self.send_error(exc, request_id)
            return
        headers |= {"x-request-id": request_id, "request-id": request_id}
        await self.send_json(200, answer, headers)

    async def _count(
        self,
        find: Callable[[str], UpstreamClient | None],
        candidates: list[str],
        pool: Mapping[str, str],
        body: dict[str, object],
        request_id: str,
    ) -> dict[str, object]:
        """The first of `candidates`' answers that is not "this backend, now" (429, 5xx,
        unreachable): those try the next; a refusal of the body is the client's answer."""
        failure: BackendError | None = None
        for name in candidates:
            client = find(name)
            if client is None:
                continue
            try:
                _, answer = await client.complete(
                    PATH, {**body, "model": pool[name]}, request_id=request_id
                )
            except BackendError as exc:
                if not exc.retryable and not exc.unreachable:
                    raise as_api_error(exc) from None
                failure = exc
                continue
            return answer
        if failure is not None:
            raise as_api_error(failure)
        raise no_backend(str(body.get("model")))
