# Django's path() is typed for views; Channels routes ASGI applications with it.
# mypy: disable-error-code="arg-type"
"""The ASGI entry point served by daphne: HTTP and WebSocket routing.

The OpenAI surface, /metrics and the health checks go straight to Channels consumers; every
other HTTP path (the admin, reports, the self-service API) goes to Django. `build_application`
builds it for given settings (tests build one with CORS on); daphne serves `application`.
"""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "llmserver.settings")
django_asgi = get_asgi_application()

# These need Django set up first.
from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402
from django.urls import path, re_path  # noqa: E402

from llmserver import dashboard  # noqa: E402
from llmserver.api.batches import (  # noqa: E402
    BatchCancelConsumer,
    BatchConsumer,
    BatchesConsumer,
)
from llmserver.api.cors import with_cors  # noqa: E402
from llmserver.api.count_tokens import CountTokensConsumer  # noqa: E402
from llmserver.api.files import FileConsumer, FileContentConsumer, FilesConsumer  # noqa: E402
from llmserver.api.http import (  # noqa: E402
    ChatCompletionsConsumer,
    EmbeddingsConsumer,
    HealthConsumer,
    MessagesConsumer,
    MetricsConsumer,
    ModelConsumer,
    ModelsConsumer,
    NotFoundConsumer,
    ReadyConsumer,
    RerankConsumer,
    ResponsesConsumer,
    ScoreConsumer,
    ServingConsumer,
    TextCompletionsConsumer,
)
from llmserver.api.requests import RequestStatusConsumer  # noqa: E402
from llmserver.api.websocket import CompletionSocketConsumer  # noqa: E402
from llmserver.conf import GatewaySettings, gateway_settings  # noqa: E402
from llmserver.dashboard import DashboardConsumer  # noqa: E402


def build_application(conf: GatewaySettings) -> ProtocolTypeRouter:
    """The application for these settings: CORS (`CORS_ALLOWED_ORIGINS`) is decided here, once,
    so with none configured the `/v1` routes run with no middleware at all."""
    v1 = with_cors(conf.cors_allowed_origins)
    http_routes = [
        path("v1/chat/completions", v1(ChatCompletionsConsumer.as_asgi())),
        path("v1/completions", v1(TextCompletionsConsumer.as_asgi())),
        path("v1/embeddings", v1(EmbeddingsConsumer.as_asgi())),
        path("v1/responses", v1(ResponsesConsumer.as_asgi())),
        path("v1/messages", v1(MessagesConsumer.as_asgi())),
        path("v1/messages/count_tokens", v1(CountTokensConsumer.as_asgi())),
        path("v1/rerank", v1(RerankConsumer.as_asgi())),
        path("v1/score", v1(ScoreConsumer.as_asgi())),
        path("v1/models", v1(ModelsConsumer.as_asgi())),
        path("v1/requests/<str:request_id>", v1(RequestStatusConsumer.as_asgi())),
        # The Batch API: files in, batches run on the batch band, files out.
        path("v1/files", v1(FilesConsumer.as_asgi())),
        path("v1/files/<str:file_id>", v1(FileConsumer.as_asgi())),
        path("v1/files/<str:file_id>/content", v1(FileContentConsumer.as_asgi())),
        path("v1/batches", v1(BatchesConsumer.as_asgi())),
        path("v1/batches/<str:batch_id>", v1(BatchConsumer.as_asgi())),
        path("v1/batches/<str:batch_id>/cancel", v1(BatchCancelConsumer.as_asgi())),
        # Model names may hold slashes ("meta-llama/Llama-3.1-8B").
        re_path(r"^v1/models/(?P<model>.+)$", v1(ModelConsumer.as_asgi())),
        re_path(r"^v1/", v1(NotFoundConsumer.as_asgi())),
        # vLLM's own names for rerank and score (`pooling/scoring/api_router.py`).
        path("rerank", v1(RerankConsumer.as_asgi())),
        path("v2/rerank", v1(RerankConsumer.as_asgi())),
        path("score", v1(ScoreConsumer.as_asgi())),
        path("metrics", MetricsConsumer.as_asgi()),
        path("health", ServingConsumer.as_asgi()),  # vLLM's health check, for load tools
        path("healthz", HealthConsumer.as_asgi()),
        path("readyz", ReadyConsumer.as_asgi()),
        re_path(r"", django_asgi),
    ]

    # The dashboards trust the session cookie, which a browser sends from any page: only pages
    # served from one of ALLOWED_HOSTS may open it (a socket with no Origin, or a foreign one, is
    # refused). The completions socket takes a bearer key, never the cookie, so any origin may.
    websocket_routes = [
        path("ws/v1/chat/completions", CompletionSocketConsumer.as_asgi()),
        path(dashboard.WS_PATH, AllowedHostsOriginValidator(DashboardConsumer.as_asgi())),
        path(
            dashboard.TENANT_WS_PATH,
            AllowedHostsOriginValidator(dashboard.TenantQueueConsumer.as_asgi()),
        ),
    ]

    return ProtocolTypeRouter(
        {
            "http": URLRouter(http_routes),
            "websocket": AuthMiddlewareStack(URLRouter(websocket_routes)),
        }
    )


application = build_application(gateway_settings())
