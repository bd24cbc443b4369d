"""Process settings for LLM-Server, read from the environment.

With no environment at all this runs on SQLite with the in-memory channel layer, so that a fresh
laptop works. Everything an operator tunes per tenant lives in the database, not here.
"""

from __future__ import annotations

import os
import secrets
import tempfile
import warnings
from pathlib import Path

import django_stubs_ext

from llmserver.api.cors import allowed_origins
from llmserver.conf import DEFAULTS as D
from llmserver.conf import SchedulerTransportKind
from llmserver.env import (
    database_from_url,
    enum_values,
    env_bool,
    env_choice,
    env_cidrs,
    env_float,
    env_int,
    env_list,
    env_str,
    otlp_traces_endpoint,
    redis_url,
    sso_from_env,
    traces_exporters,
)
from llmserver.proxy import FORWARDED_PROTO, csrf_trusted_origins
from scheduling import CostUnit, WithinPrincipal
from tenants.sso.config import sso_settings

django_stubs_ext.monkeypatch()

BASE_DIR = Path(__file__).resolve().parent.parent

DEBUG = env_bool("DEBUG", False)

SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    SECRET_KEY = "dev-" + secrets.token_urlsafe(48)
    warnings.warn(
        "SECRET_KEY is not set: using a generated one; sessions end when the process restarts.",
        stacklevel=1,
    )

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost", "[::1]", "testserver"])
# Behind a reverse proxy (docs/DEPLOYMENT.md): the origins whose admin POSTs pass CSRF, and the
# proxies whose X-Forwarded-Proto, -Host and -For headers are believed (`llmserver/proxy.py`).
CSRF_TRUSTED_ORIGINS = csrf_trusted_origins(env_list("CSRF_TRUSTED_ORIGINS", []))
TRUSTED_PROXIES = env_cidrs("TRUSTED_PROXIES")
SECURE_PROXY_SSL_HEADER = FORWARDED_PROTO if TRUSTED_PROXIES else None
USE_X_FORWARDED_HOST = bool(TRUSTED_PROXIES)

INSTALLED_APPS = [
    "daphne",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "rest_framework",
    "channels",
    "tenants",
    "llmserver",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # Who changes the configuration, for the audit trail (admin user or API key, address).
    "tenants.audit_actor.audit_context",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "llmserver.urls"
ASGI_APPLICATION = "llmserver.asgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {
    "default": database_from_url(
        env_str("DATABASE_URL", "sqlite:///db.sqlite3"), base_dir=str(BASE_DIR)
    )
}
if str(DATABASES["default"]["ENGINE"]).endswith("sqlite3"):
    # The usage writer and the admin share the file; wait rather than fail on a busy database.
    # In WAL mode the key checks read on while the usage writer commits, instead of waiting.
    DATABASES["default"]["OPTIONS"] = {
        "timeout": 20,
        "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL",
    }
    # Tests run on a file like a deployment's, not on Django's shared-cache memory database:
    # there SQLite locks whole tables and ignores the busy timeout, so a key check that reads
    # while the usage writer writes failed at once ("database table is locked"), which no
    # deployment sees.
    DATABASES["default"]["TEST"] = {
        "NAME": os.path.join(tempfile.gettempdir(), f"llmserver-test-{os.getpid()}.sqlite3")
    }

REDIS_URL = redis_url("REDIS_URL")
if REDIS_URL:
    CHANNEL_LAYERS = {
        "default": {
            "BACKEND": "channels_redis.core.RedisChannelLayer",
            "CONFIG": {"hosts": [REDIS_URL]},
        }
    }
else:
    CHANNEL_LAYERS = {"default": {"BACKEND": "channels.layers.InMemoryChannelLayer"}}

DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
# Where a tenant's administrator or member lands after signing in (operators: the admin).
LOGIN_REDIRECT_URL = "/portal/"

# Single sign-on (OpenID Connect, tenants/sso): off unless OIDC_RP_CLIENT_ID is set, and then
# beside the local passwords, which stay the break-glass (docs/DEPLOYMENT.md, "Single sign-on").
SSO = sso_from_env()
if SSO is not None:
    globals().update(sso_settings(SSO))

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
]
LANGUAGE_CODE = "en-us"
TIME_ZONE = env_str("TIME_ZONE", "UTC")
USE_I18N = True
USE_TZ = True
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"plain": {"format": "%(asctime)s %(levelname)s %(name)s: %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "root": {"handlers": ["console"], "level": env_str("LOG_LEVEL", "INFO").upper()},
    "loggers": {
        "daphne": {"level": "WARNING"},
        "httpx": {"level": "WARNING"},
        "django.channels.server": {"level": "WARNING"},
    },
}

# The gateway's own tuning: how it talks to backends and schedules; tenants and tiers are in the DB.
# Read through `llmserver.conf.GatewaySettings`, never by key; its defaults are the ones (`D`).
LLMSERVER = {
    "COST_UNIT": env_choice("SCHEDULER_COST_UNIT", enum_values(CostUnit), D.cost_unit),
    "OUTPUT_TOKEN_WEIGHT": env_float(
        "SCHEDULER_OUTPUT_TOKEN_WEIGHT", D.output_token_weight, minimum=0.0
    ),
    "WITHIN_PRINCIPAL": env_choice(
        "SCHEDULER_WITHIN_PRINCIPAL", enum_values(WithinPrincipal), D.within_principal
    ),
    "AGING_SECONDS": env_float("SCHEDULER_AGING_SECONDS", D.aging_seconds or 0.0, minimum=0.0)
    or None,
    "AFFINITY_SLACK": env_int("SCHEDULER_AFFINITY_SLACK", D.affinity_slack, minimum=0),
    "PREFIX_INDEX_BLOCKS": env_int(
        "SCHEDULER_PREFIX_INDEX_BLOCKS", D.prefix_index_blocks, minimum=1
    ),
    "BATCH_SLACK": env_float("SCHEDULER_BATCH_SLACK", D.batch_slack, minimum=0.0),
    "BATCH_MIN_BLOCKS": env_int("SCHEDULER_BATCH_MIN_BLOCKS", D.batch_min_blocks, minimum=1),
    "SCRAPE_INTERVAL": env_float("SCRAPE_INTERVAL", D.scrape_interval, minimum=0.01),
    "SCRAPE_TIMEOUT": env_float("SCRAPE_TIMEOUT", D.scrape_timeout, minimum=0.01),
    "STALE_AFTER": env_float("METRICS_STALE_AFTER", D.stale_after, minimum=0.01),
    "UPSTREAM_CONNECT_TIMEOUT": env_float(
        "UPSTREAM_CONNECT_TIMEOUT", D.upstream_connect_timeout, minimum=0.1
    ),
    "UPSTREAM_READ_TIMEOUT": env_float(
        "UPSTREAM_READ_TIMEOUT", D.upstream_read_timeout, minimum=1.0
    ),
    "UPSTREAM_MAX_CONNECTIONS": env_int(
        "UPSTREAM_MAX_CONNECTIONS", D.upstream_max_connections, minimum=1
    ),
    "UPSTREAM_KEEPALIVE_EXPIRY": env_float(
        "UPSTREAM_KEEPALIVE_EXPIRY", D.upstream_keepalive_expiry, minimum=0.0
    ),
    "MAX_BODY_BYTES": env_int("MAX_BODY_BYTES", D.max_body_bytes, minimum=1024),
    "MAX_TOKENS_LIMIT": env_int("MAX_TOKENS_LIMIT", D.max_tokens_limit, minimum=1),
    "DEFAULT_MAX_TOKENS": env_int("DEFAULT_MAX_TOKENS", D.default_max_tokens, minimum=1),
    "USAGE_FLUSH_INTERVAL": env_float("USAGE_FLUSH_INTERVAL", D.usage_flush_interval, minimum=0.01),
    "USAGE_BATCH_SIZE": env_int("USAGE_BATCH_SIZE", D.usage_batch_size, minimum=1),
    # Its least value is tenants.retention.MIN_DAYS, checked at start (gateway.E004).
    "USAGE_RETENTION_DAYS": env_int("USAGE_RETENTION_DAYS", D.usage_retention_days),
    "RESPONSES_RETENTION_DAYS": env_int(
        "RESPONSES_RETENTION_DAYS", D.responses_retention_days, minimum=1
    ),
    "KEY_CACHE_SECONDS": env_float("KEY_CACHE_SECONDS", D.key_cache_seconds, minimum=0.0),
    "DRAIN_SECONDS": env_float("DRAIN_SECONDS", D.drain_seconds, minimum=0.0),
    "CLIENT_READ_TIMEOUT": env_float("CLIENT_READ_TIMEOUT", D.client_read_timeout, minimum=0.1),
    "CLIENT_IDLE_TIMEOUT": env_float("CLIENT_IDLE_TIMEOUT", D.client_idle_timeout, minimum=0.1),
    "METRICS_TOKEN": env_str("METRICS_TOKEN", D.metrics_token),
    "METRICS_ALLOW": env_cidrs("METRICS_ALLOW"),
    "CORS_ALLOWED_ORIGINS": allowed_origins(
        env_list("CORS_ALLOWED_ORIGINS", list(D.cors_allowed_origins))
    ),
    "ACCESS_LOG": env_bool("ACCESS_LOG", D.access_log),
    "RATE_LIMIT_REDIS_URL": REDIS_URL,
    # One scheduler for many processes (docs/DEPLOYMENT.md): "redis" needs REDIS_URL.
    "SCHEDULER_TRANSPORT": env_choice(
        "SCHEDULER_TRANSPORT", enum_values(SchedulerTransportKind), D.scheduler_transport
    ),
    "REDIS_URL": REDIS_URL,
    "CLUSTER_PREFIX": env_str("CLUSTER_PREFIX", D.cluster_prefix),
    "CLUSTER_LEASE_SECONDS": env_float(
        "CLUSTER_LEASE_SECONDS", D.cluster_lease_seconds, minimum=0.3
    ),
    # The Batch API: files on disk (a shared volume for several processes), batches run here.
    "FILES_DIR": env_str("FILES_DIR", D.files_dir),
    "FILES_MAX_BYTES": env_int("FILES_MAX_BYTES", D.files_max_bytes, minimum=1024),
    "BATCH_MAX_LINES": env_int("BATCH_MAX_LINES", D.batch_max_lines, minimum=1),
    "BATCH_CONCURRENCY": env_int("BATCH_CONCURRENCY", D.batch_concurrency, minimum=1),
    "BATCH_MAX_ACTIVE": env_int("BATCH_MAX_ACTIVE", D.batch_max_active, minimum=1),
    "BATCH_POLL_INTERVAL": env_float("BATCH_POLL_INTERVAL", D.batch_poll_interval, minimum=0.01),
    "BATCH_LEASE_SECONDS": env_float("BATCH_LEASE_SECONDS", D.batch_lease_seconds, minimum=1.0),
    # Tracing: OpenTelemetry's own variables, off unless they name an exporter or an endpoint
    # (docs/OPERATIONS.md, "Tracing"); the sampler and the exporter's headers the SDK reads.
    "TRACES_EXPORTERS": traces_exporters(),
    "OTLP_TRACES_ENDPOINT": otlp_traces_endpoint(D.otlp_traces_endpoint),
    "SERVICE_NAME": env_str("OTEL_SERVICE_NAME", D.service_name),
}

# The tenant self-service API: API-key auth only, JSON only, OpenAI-shaped errors.
REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": ["tenants.api.auth.ApiKeyAuthentication"],
    "DEFAULT_PERMISSION_CLASSES": ["rest_framework.permissions.IsAuthenticated"],
    "DEFAULT_RENDERER_CLASSES": ["rest_framework.renderers.JSONRenderer"],
    "DEFAULT_PARSER_CLASSES": ["rest_framework.parsers.JSONParser"],
    "DEFAULT_SCHEMA_CLASS": "rest_framework.schemas.openapi.AutoSchema",
    "EXCEPTION_HANDLER": "tenants.api.errors.openai_exception_handler",
    "UNAUTHENTICATED_USER": None,
    "COERCE_DECIMAL_TO_STRING": True,
}
