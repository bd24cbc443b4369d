"""Tiny helpers that read process settings from the environment, for `llmserver/settings.py`,
the one reader of the environment: every other module reads settings.

Each returns the default when the variable is unset or empty and raises ImproperlyConfigured,
naming the variable, when a value cannot be read. The groups of variables that make one value
are read here too: the database's and Redis's URLs, single sign-on's `OIDC_*` and tracing's
`OTEL_*`.
"""

from __future__ import annotations

import os
from enum import StrEnum
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

from tenants.sso.config import ENDPOINT_VARIABLES, SIGN_ALGORITHMS, RoleRules, SsoConfig

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def env_str(name: str, default: str = "") -> str:
    return os.environ.get(name, "") or default


def env_bool(name: str, default: bool = False) -> bool:
    raw = os.environ.get(name, "").strip().lower()
    if not raw:
        return default
    if raw in _TRUE:
        return True
    if raw in _FALSE:
        return False
    raise ImproperlyConfigured(
        f"{name} must be one of 1/0, true/false, yes/no, on/off; got {raw!r}"
    )


def env_int(name: str, default: int, minimum: int | None = None) -> int:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer; got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}; got {value}")
    return value


def env_float(name: str, default: float, minimum: float | None = None) -> float:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number; got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}; got {value}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name, "").strip()
    if not raw:
        return list(default)
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_cidrs(name: str) -> tuple[str, ...]:
    """A comma-separated list of networks ("10.0.0.0/8, 127.0.0.1"), each checked."""
    import ipaddress

    networks = []
    for item in env_list(name, []):
        try:
            networks.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise ImproperlyConfigured(f"{name} must list IP networks; got {item!r}") from None
    return tuple(networks)


def env_url(name: str) -> str:
    """An http(s) URL, or "" when unset."""
    value = env_str(name).strip()
    if value and (urlsplit(value).scheme not in {"http", "https"} or not urlsplit(value).netloc):
        raise ImproperlyConfigured(f"{name} must be an http(s) URL; got {value!r}")
    return value


def enum_values(values: type[StrEnum]) -> tuple[str, ...]:
    """An enum's values, the choices of the variable that names one."""
    return tuple(v.value for v in values)


def env_choice(name: str, choices: tuple[str, ...], default: str) -> str:
    raw = os.environ.get(name, "").strip().lower() or default
    if raw not in choices:
        raise ImproperlyConfigured(f"{name} must be one of {', '.join(choices)}; got {raw!r}")
    return raw


def database_from_url(url: str, base_dir: str) -> dict[str, object]:
    """Turn `sqlite:///path` or `postgres://user:pass@host:port/name` into a DATABASES entry."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme == "sqlite":
        # sqlite:///relative/path and sqlite:////absolute/path, as SQLAlchemy spells them.
        raw = unquote(parts.path) if parts.netloc == "" else ""
        path = "/" + raw.lstrip("/") if raw.startswith("//") else raw[1:]
        if not path:
            raise ImproperlyConfigured(
                f"DATABASE_URL {url!r}: a SQLite URL needs a path, e.g. sqlite:///db.sqlite3"
            )
        if not os.path.isabs(path) and path != ":memory:":
            path = os.path.join(base_dir, path)
        # Kept open: nothing can drop a SQLite connection, and closing one is not free (the
        # last connection to a file checkpoints its journal). With Django's default of 0, every
        # database job of the gateway (the usage writer, the key checks) reconnected.
        return {"ENGINE": "django.db.backends.sqlite3", "NAME": path, "CONN_MAX_AGE": None}
    if scheme in {"postgres", "postgresql", "pgsql"}:
        name = unquote(parts.path.lstrip("/"))
        if not name:
            raise ImproperlyConfigured(
                f"DATABASE_URL {url!r}: a PostgreSQL URL needs a database name"
            )
        try:
            port = parts.port
        except ValueError:
            raise ImproperlyConfigured(f"DATABASE_URL {url!r}: the port is not a number") from None
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": name,
            "USER": unquote(parts.username or ""),
            "PASSWORD": unquote(parts.password or ""),
            "HOST": parts.hostname or "",
            "PORT": str(port or ""),
            "CONN_MAX_AGE": 60,
            "CONN_HEALTH_CHECKS": True,
        }
    raise ImproperlyConfigured(
        f"DATABASE_URL {url!r}: unsupported scheme {scheme!r} (use sqlite:// or postgres://)"
    )


def redis_url(name: str) -> str:
    url = env_str(name)
    if url and urlsplit(url).scheme not in {"redis", "rediss", "unix"}:
        raise ImproperlyConfigured(f"{name} must be a redis:// or rediss:// URL; got {url!r}")
    return url


def sso_from_env() -> SsoConfig | None:
    """Single sign-on's configuration (`tenants.sso.config`), None unless `OIDC_RP_CLIENT_ID`
    is set. Set, it needs the client's secret and either the provider's issuer or all four
    endpoints by name; anything less stops start-up naming the variable."""
    client_id = env_str("OIDC_RP_CLIENT_ID").strip()
    if not client_id:
        return None
    secret = env_str("OIDC_RP_CLIENT_SECRET")
    if not secret:
        raise ImproperlyConfigured("OIDC_RP_CLIENT_ID is set: OIDC_RP_CLIENT_SECRET is needed too")
    issuer = env_url("OIDC_OP_ISSUER")
    endpoints = {key: url for key, name in ENDPOINT_VARIABLES.items() if (url := env_url(name))}
    if not issuer and len(endpoints) < len(ENDPOINT_VARIABLES):
        missing = [n for k, n in ENDPOINT_VARIABLES.items() if k not in endpoints]
        raise ImproperlyConfigured(
            "OIDC_RP_CLIENT_ID is set: name the provider by OIDC_OP_ISSUER, or set "
            + ", ".join(missing)
        )
    rules = RoleRules(
        claim=env_str("OIDC_ROLES_CLAIM", RoleRules.claim).strip(),
        operator_groups=frozenset(env_list("OIDC_OPERATOR_GROUPS", ["llmserver:operators"])),
        superuser_groups=frozenset(env_list("OIDC_SUPERUSER_GROUPS", [])),
        tenant_prefix=env_str("OIDC_TENANT_ROLE_PREFIX", RoleRules.tenant_prefix).strip(),
    )
    return SsoConfig(
        client_id=client_id,
        client_secret=secret,
        issuer=issuer,
        endpoints=endpoints,
        sign_algo=env_choice("OIDC_RP_SIGN_ALGO", SIGN_ALGORITHMS, "rs256").upper(),
        scopes=env_str("OIDC_RP_SCOPES", "openid email profile"),
        rules=rules,
        operators_group=env_str("OIDC_OPERATORS_GROUP", "operators (single sign-on)"),
        session_seconds=env_int("OIDC_SESSION_SECONDS", 8 * 3600, minimum=60),
        timeout=float(env_int("OIDC_TIMEOUT", 10, minimum=1)),
    )


# OTEL_TRACES_EXPORTER's values that the gateway can export to ("none" is off).
EXPORTERS = ("otlp", "console")
# The only OTLP protocol the installed exporter speaks; every collector takes it (port 4318).
OTLP_PROTOCOL = "http/protobuf"


def traces_exporters() -> tuple[str, ...]:
    """The exporters spans go to (`llmserver.runtime.tracing`); empty is off.
    `OTEL_TRACES_EXPORTER` names them ("none" is off); unset, "otlp" where an OTLP endpoint is
    set, else off: unlike OpenTelemetry's own default ("otlp" to localhost), a gateway traces
    only when asked. `OTEL_SDK_DISABLED=true` turns everything off."""
    if env_bool("OTEL_SDK_DISABLED", False):
        return ()
    names = [name.lower() for name in env_list("OTEL_TRACES_EXPORTER", [])]
    if not names:
        endpoint = env_str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT") or env_str(
            "OTEL_EXPORTER_OTLP_ENDPOINT"
        )
        names = ["otlp"] if endpoint else []
    chosen = tuple(dict.fromkeys(name for name in names if name != "none"))
    unknown = [name for name in chosen if name not in EXPORTERS]
    if unknown:
        raise ImproperlyConfigured(
            f"OTEL_TRACES_EXPORTER must list {', '.join(EXPORTERS)} or none; got {unknown[0]!r}"
        )
    if "otlp" in chosen:
        protocol = env_str("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL") or env_str(
            "OTEL_EXPORTER_OTLP_PROTOCOL", OTLP_PROTOCOL
        )
        if protocol != OTLP_PROTOCOL:
            raise ImproperlyConfigured(
                f"OTEL_EXPORTER_OTLP_PROTOCOL must be {OTLP_PROTOCOL} (the collector's port "
                f"4318); got {protocol!r}"
            )
    return chosen


def otlp_traces_endpoint(default: str) -> str:
    """The URL spans are posted to, as OpenTelemetry reads it: the traces endpoint as it is,
    else the general endpoint with `/v1/traces` added, else `default`."""
    traces = env_str("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if traces:
        return traces
    base = env_str("OTEL_EXPORTER_OTLP_ENDPOINT")
    return base.rstrip("/") + "/v1/traces" if base else default
