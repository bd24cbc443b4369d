"""The deployment files under docs/deploy/ hold what docs/DEPLOYMENT.md says they do."""

from __future__ import annotations

import subprocess
import sys
from io import StringIO
from pathlib import Path

from django.core.management import call_command

from tenants.models import Tier

DEPLOY = Path(__file__).resolve().parents[2] / "docs" / "deploy"


def _pairs(path: Path) -> dict[str, str]:
    """`KEY=value` lines, as systemd reads an environment file and a unit's [Service]."""
    pairs = {}
    for line in path.read_text().splitlines():
        if line.strip() and not line.lstrip().startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            pairs[key.strip()] = value.strip()
    return pairs


def test_the_example_environment_is_accepted_by_the_settings() -> None:
    env = {k: v for k, v in _pairs(DEPLOY / "env.example").items() if v}
    code = (
        "import django, os; os.environ['DJANGO_SETTINGS_MODULE']='llmserver.settings'; "
        "django.setup(); from django.conf import settings; "
        "print(settings.CSRF_TRUSTED_ORIGINS, settings.SECURE_PROXY_SSL_HEADER)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env={"PATH": "/usr/bin:/bin", "SECRET_KEY": "x", **env},
        capture_output=True,
        text=True,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [
        "['https://llm.example.com']",
        "('HTTP_X_FORWARDED_PROTO',",
        "'https')",
    ]


def test_the_gateway_unit_drains_within_its_stop_timeout() -> None:
    unit = _pairs(DEPLOY / "llm-server.service")
    drain = float(_pairs(DEPLOY / "env.example")["DRAIN_SECONDS"])
    assert "manage.py rungateway" in unit["ExecStart"]
    assert unit["EnvironmentFile"] == "/etc/llm-server/env"
    assert (unit["KillSignal"], unit["KillMode"]) == ("SIGTERM", "mixed")
    assert float(unit["TimeoutStopSec"]) > drain


def test_the_proxy_example_streams_unbuffered_and_sets_the_forwarded_headers() -> None:
    conf = (DEPLOY / "nginx.conf").read_text()
    for line in (
        "proxy_buffering off;",
        "proxy_set_header X-Forwarded-Proto $scheme;",
        "proxy_set_header X-Forwarded-Host $host;",
        "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;",
        "proxy_set_header Upgrade $http_upgrade;",
    ):
        assert line in conf


def test_the_first_tiers_apply(db: None) -> None:
    call_command("apply_config", str(DEPLOY / "first-tiers.json"), stdout=StringIO())
    assert list(Tier.objects.values_list("name", "band")) == [
        ("interactive", 0),
        ("standard", 1),
        ("batch", 2),
    ]
