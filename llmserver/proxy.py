"""What the admin and the self-service API trust of the reverse proxy in front (issue 28,
deployment; docs/DEPLOYMENT.md, "Behind a reverse proxy").

Two settings, both read from the environment in `settings.py`:

- `CSRF_TRUSTED_ORIGINS`: the origins (`https://llm.example.com`) whose pages may POST to the
  admin. Django compares a POST's `Origin` with the scheme and host it believes it was reached
  at; behind a TLS proxy that forwards plain HTTP, that belief is `http://`, and the admin login
  answers 403 "Origin checking failed" unless the origin is listed here (or the proxy is
  trusted, below). Checked at start-up: an origin without a scheme, with a path, or `*` stops it.
- `TRUSTED_PROXIES`: the networks of the proxies in front. Naming any turns on Django's
  `SECURE_PROXY_SSL_HEADER` (`X-Forwarded-Proto: https` makes a request secure) and
  `USE_X_FORWARDED_HOST`, and lets the audit trail take the client's address from
  `X-Forwarded-For` when the TCP peer is one of them (`tenants.audit_actor.client_address`).
"""

from __future__ import annotations

from collections.abc import Iterable

from django.core.exceptions import ImproperlyConfigured

from llmserver.api.cors import allowed_origins

FORWARDED_PROTO = ("HTTP_X_FORWARDED_PROTO", "https")


def csrf_trusted_origins(values: Iterable[str]) -> list[str]:
    """Each origin checked and spelled as a browser sends it; `https://*.example.com` (Django's
    subdomain wildcard) is allowed, a bare `*` is not."""
    origins = [value.strip() for value in values if value.strip()]
    name = "CSRF_TRUSTED_ORIGINS"
    for origin in origins:
        if not origin.lower().startswith(("http://", "https://")):
            raise ImproperlyConfigured(
                f"{name} must list origins such as https://llm.example.com; got {origin!r}"
            )
    return list(allowed_origins(origins, name))
