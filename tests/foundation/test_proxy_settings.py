"""Behind a TLS proxy the admin login works once the deployment names what it trusts:
`CSRF_TRUSTED_ORIGINS`, or `TRUSTED_PROXIES` (forwarded proto and host believed)."""

from __future__ import annotations

import subprocess
import sys

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import Client

from llmserver.proxy import FORWARDED_PROTO, csrf_trusted_origins
from tests.foundation.audit_helpers import operator

ORIGIN = "https://llm.example.com"


def _login(secure: bool, **headers: str) -> int:
    """The admin login as a browser posts it: the CSRF cookie from the form, then the POST."""
    operator("root")
    client = Client(enforce_csrf_checks=True)
    client.get("/admin/login/", secure=secure, **headers)
    token = client.cookies["csrftoken"].value
    response = client.post(
        "/admin/login/",
        {"username": "root", "password": "pw", "csrfmiddlewaretoken": token, "next": "/admin/"},
        secure=secure,
        HTTP_ORIGIN=ORIGIN,
        **headers,
    )
    return response.status_code


def test_the_admin_login_from_a_trusted_https_origin_is_accepted(db: None, settings) -> None:
    settings.CSRF_TRUSTED_ORIGINS = [ORIGIN]
    # The proxy passes TLS on as plain HTTP to 127.0.0.1:8000, its own Host.
    assert _login(secure=True, HTTP_HOST="127.0.0.1:8000") == 302


def test_an_untrusted_origin_fails_origin_checking(db: None, settings, caplog) -> None:
    settings.CSRF_TRUSTED_ORIGINS = []
    assert _login(secure=True, HTTP_HOST="127.0.0.1:8000") == 403
    assert "Origin checking failed" in caplog.text


def test_behind_a_trusted_proxy_the_forwarded_proto_and_host_are_believed(
    db: None, settings
) -> None:
    settings.CSRF_TRUSTED_ORIGINS = []
    settings.ALLOWED_HOSTS = ["llm.example.com"]
    settings.SECURE_PROXY_SSL_HEADER = FORWARDED_PROTO
    settings.USE_X_FORWARDED_HOST = True
    forwarded = {
        "HTTP_HOST": "127.0.0.1:8000",
        "HTTP_X_FORWARDED_HOST": "llm.example.com",
        "HTTP_X_FORWARDED_PROTO": "https",
    }
    assert _login(secure=False, **forwarded) == 302


@pytest.mark.parametrize(
    "value", ["llm.example.com", "*", "https://llm.example.com/admin", "ftp://llm.example.com"]
)
def test_a_malformed_csrf_trusted_origin_is_refused(value: str) -> None:
    with pytest.raises(ImproperlyConfigured, match="CSRF_TRUSTED_ORIGINS"):
        csrf_trusted_origins([value])


def test_origins_are_spelled_as_browsers_send_them() -> None:
    assert csrf_trusted_origins([" https://LLM.example.com:443", "https://*.example.com"]) == [
        "https://llm.example.com",
        "https://*.example.com",
    ]


def _settings_of(env: dict[str, str], *names: str) -> subprocess.CompletedProcess[str]:
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='llmserver.settings'; "
        "django.setup(); from django.conf import settings; "
        f"print(*[repr(getattr(settings, n)) for n in {names!r}], sep='|')"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        env={"PATH": "/usr/bin:/bin", "SECRET_KEY": "x", **env},
        capture_output=True,
        text=True,
    )


def test_the_environment_sets_the_trusted_origins_and_proxies() -> None:
    out = _settings_of(
        {"CSRF_TRUSTED_ORIGINS": "https://llm.example.com", "TRUSTED_PROXIES": "127.0.0.1"},
        "CSRF_TRUSTED_ORIGINS",
        "TRUSTED_PROXIES",
        "SECURE_PROXY_SSL_HEADER",
        "USE_X_FORWARDED_HOST",
    )
    assert out.stdout.strip().split("|") == [
        "['https://llm.example.com']",
        "('127.0.0.1/32',)",
        "('HTTP_X_FORWARDED_PROTO', 'https')",
        "True",
    ]


def test_without_trusted_proxies_no_forwarded_header_is_believed() -> None:
    out = _settings_of({}, "SECURE_PROXY_SSL_HEADER", "USE_X_FORWARDED_HOST")
    assert out.stdout.strip() == "None|False"


def test_a_bad_origin_in_the_environment_stops_start_up_naming_it() -> None:
    out = _settings_of({"CSRF_TRUSTED_ORIGINS": "llm.example.com"}, "DEBUG")
    assert out.returncode != 0
    assert "CSRF_TRUSTED_ORIGINS must list origins" in out.stderr
