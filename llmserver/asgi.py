# Django's path() is typed for views; Channels routes ASGI applications with it.
# mypy: disable-error-code="arg-type"
"""The ASGI entry point served by daphne: HTTP and WebSocket routing.

The OpenAI surface, /metrics and the health checks go straight to Channels consumers; every
other HTTP path (the admin, reports, the self-service API) goes to Django.
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
from llmserver.api.http import (  # noqa: E402
    ChatCompletionsConsumer,
    HealthConsumer,
    MetricsConsumer,
    ModelConsumer,
    ModelsConsumer,
    NotFoundConsumer,
    ReadyConsumer,
    TextCompletionsConsumer,
)
from llmserver.api.requests import RequestStatusConsumer  # noqa: E402
from llmserver.api.websocket import CompletionSocketConsumer  # noqa: E402
from llmserver.dashboard import DashboardConsumer  # noqa: E402

http_routes = [
    path("v1/chat/completions", ChatCompletionsConsumer.as_asgi()),
    path("v1/completions", TextCompletionsConsumer.as_asgi()),
    path("v1/models", ModelsConsumer.as_asgi()),
    path("v1/requests/<str:request_id>", RequestStatusConsumer.as_asgi()),
    # Model names may hold slashes ("meta-llama/Llama-3.1-8B").
    re_path(r"^v1/models/(?P<model>.+)$", ModelConsumer.as_asgi()),
    re_path(r"^v1/", NotFoundConsumer.as_asgi()),
    path("metrics", MetricsConsumer.as_asgi()),
    path("healthz", HealthConsumer.as_asgi()),
    path("readyz", ReadyConsumer.as_asgi()),
    re_path(r"", django_asgi),
]

# The dashboard trusts the session cookie, which a browser sends from any page: only pages served
# from one of ALLOWED_HOSTS may open it (a socket with no Origin, or a foreign one, is refused).
# The completions socket takes a bearer key, never the cookie, so any origin may use it.
websocket_routes = [
    path("ws/v1/chat/completions", CompletionSocketConsumer.as_asgi()),
    path(dashboard.WS_PATH, AllowedHostsOriginValidator(DashboardConsumer.as_asgi())),
]

application = ProtocolTypeRouter(
    {
        "http": URLRouter(http_routes),
        "websocket": AuthMiddlewareStack(URLRouter(websocket_routes)),
    }
)
