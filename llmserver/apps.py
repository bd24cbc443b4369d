from __future__ import annotations

from django.apps import AppConfig


class LlmServerConfig(AppConfig):
    name = "llmserver"
    label = "gateway"
    verbose_name = "Gateway"

    def ready(self) -> None:
        from llmserver import checks, signals  # noqa: F401  (register checks and receivers)
