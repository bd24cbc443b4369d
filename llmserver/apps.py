from __future__ import annotations

from django.apps import AppConfig


class GatewayConfig(AppConfig):
    name = "llmserver"
    label = "gateway"
    verbose_name = "Gateway"
