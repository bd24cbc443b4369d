"""Tiny helpers that read process settings from the environment.

Each returns the default when the variable is unset or empty and raises ImproperlyConfigured,
naming the variable, when a value cannot be read.
"""

from __future__ import annotations

import os
from enum import StrEnum
from urllib.parse import unquote, urlsplit

from django.core.exceptions import ImproperlyConfigured

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
