"""Backends (inference servers) and model routes (public model name to backend pool)."""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models

from tenants.backend_kinds import CHOICES, DEFAULT_KIND, profile
from tenants.endpoints import Endpoint, parse_endpoints


def validate_endpoints(text: str) -> None:
    try:
        parse_endpoints(text)
    except ValueError as exc:
        raise ValidationError(str(exc)) from None


class Backend(models.Model):
    name = models.SlugField(max_length=64, unique=True)
    base_url = models.URLField(help_text="Where /v1/chat/completions lives, e.g. http://gpu1:8000")
    # The kinds are `tenants.backend_kinds.PROFILES`, one profile each.
    kind = models.CharField(max_length=8, choices=CHOICES, default=DEFAULT_KIND)
    metrics_url = models.URLField(
        blank=True, help_text="Prometheus endpoint; blank: base URL + /metrics (none for openai)."
    )
    kv_events_endpoint = models.CharField(
        max_length=256,
        blank=True,
        validators=[
            RegexValidator(
                r"^(tcp://[^\s*/]+:\d+|ipc://\S+)$",
                "A ZeroMQ endpoint to connect to: tcp://host:port (no wildcard), or ipc://path.",
            )
        ],
        help_text=(
            "Where the server publishes its KV cache events, as this gateway reaches it, e.g. "
            "tcp://gpu1:5557 (vLLM: --kv-events-config with enable_kv_cache_events, publisher "
            "zmq). Prompts for its models are then tokenized by the server's /tokenize and routed "
            "by what its prefix cache really holds. Blank: by this gateway's routing history."
        ),
    )
    kv_events_bind = models.BooleanField(
        default=False,
        help_text=(
            "This gateway binds the events endpoint and the server connects to it. vLLM binds "
            "only an endpoint with a wildcard (tcp://*:5557) and connects to any other: to keep "
            "its port off other interfaces, give vLLM this gateway's address and tick this. One "
            "gateway process only (a port binds once); with several, use the wildcard."
        ),
    )
    api_key = models.CharField(max_length=256, blank=True, help_text="Sent upstream as Bearer.")
    enabled = models.BooleanField(default=True)
    capacity = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text=(
            "How many requests the server runs at once (vLLM --max-num-seqs, llama.cpp -np). "
            "Blank: learned from its metrics (the most running seen while others waited)."
        ),
    )
    priority_scheduling = models.BooleanField(
        default=False,
        help_text=(
            "The server schedules its own queue by priority (vLLM: --scheduling-policy priority; "
            "SGLang: --enable-priority-scheduling). Only then is the band passed on; a stock "
            "vLLM refuses any priority."
        ),
    )
    preemption = models.BooleanField(
        default=True,
        help_text=(
            "Requests running here may be paused to make room (see the tiers' settings). On "
            "vLLM a paused stream is continued later; on other kinds a request is paused only "
            "before its first token."
        ),
    )
    max_in_flight = models.PositiveIntegerField(
        default=64,
        validators=[MinValueValidator(1)],
        help_text="Hard cap on concurrent requests; the only gate when there are no metrics.",
    )
    first_byte_timeout_seconds = models.FloatField(
        default=60.0,
        validators=[MinValueValidator(0.1)],
        help_text=(
            "How long a streamed request may wait for the backend's first event (its first "
            "token, after the prompt is read) before the backend counts as hung: the request "
            "goes to another backend of the pool, or its client gets a 502, instead of waiting "
            "for the read timeout. Raise it for very long prompts on slow hardware."
        ),
    )

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def effective_metrics_url(self) -> str:
        if self.metrics_url:
            return self.metrics_url
        if profile(self.kind).metrics is None:
            return ""
        return self.base_url.rstrip("/") + "/metrics"


class ModelRoute(models.Model):
    public_name = models.CharField(max_length=128, db_index=True)
    backend = models.ForeignKey(Backend, on_delete=models.CASCADE, related_name="routes")
    upstream_model = models.CharField(
        max_length=256,
        blank=True,
        help_text="The backend's own model name; blank: the public name.",
    )
    endpoints = models.CharField(
        max_length=128,
        blank=True,
        validators=[validate_endpoints],
        help_text="The API endpoints this backend serves the model on, comma-separated (chat, "
        "completions, embeddings, responses, messages, rerank, score). Blank: what its kind "
        "serves for a generation model (chat and completions; vLLM also responses and "
        "messages). An embedding model: 'embeddings,rerank,score'; a reranker: 'rerank,score'.",
    )
    enabled = models.BooleanField(default=True)

    class Meta:
        ordering = ["public_name", "backend__name"]
        constraints = [
            models.UniqueConstraint(fields=["public_name", "backend"], name="one_route_per_backend")
        ]

    def __str__(self) -> str:
        return f"{self.public_name} -> {self.backend.name}"

    def declared_endpoints(self) -> frozenset[Endpoint]:
        """What the operator declared; empty: the backend kind's own."""
        return parse_endpoints(self.endpoints)

    @property
    def effective_upstream_model(self) -> str:
        return self.upstream_model or self.public_name
