"""The Batch API's settings: read from the environment, defaulted in one place, checked."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from llmserver.conf import DEFAULTS, GatewaySettings

ROOT = Path(__file__).resolve().parents[2]


def read_settings(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    code = (
        "import os; os.environ['DJANGO_SETTINGS_MODULE']='llmserver.settings'; import django; "
        "django.setup(); from llmserver.conf import gateway_settings as g; s = g(); "
        "print(s.files_dir, s.files_max_bytes, s.batch_max_lines, s.batch_concurrency)"
    )
    return subprocess.run(
        [sys.executable, "-c", code],
        env={"PATH": "/usr/bin:/bin", "SECRET_KEY": "x", **env},
        capture_output=True,
        text=True,
        cwd=ROOT,
    )


def test_the_defaults_are_openais_limits_and_a_directory_under_the_project():
    assert (DEFAULTS.files_max_bytes, DEFAULTS.batch_max_lines) == (200 * 1024 * 1024, 50_000)
    assert Path(DEFAULTS.files_dir) == ROOT / "var" / "files"
    assert DEFAULTS.batch_concurrency == 8


def test_the_environment_sets_them():
    out = read_settings(
        {"FILES_DIR": "/srv/files", "BATCH_MAX_LINES": "10", "BATCH_CONCURRENCY": "2"}
    )
    assert out.stdout.split() == ["/srv/files", str(DEFAULTS.files_max_bytes), "10", "2"]


def test_a_bad_value_stops_start_up_with_the_variable_named():
    out = read_settings({"BATCH_CONCURRENCY": "0"})
    assert out.returncode != 0 and "BATCH_CONCURRENCY must be at least 1" in out.stderr


def test_they_are_read_from_llmserver_by_name():
    conf = GatewaySettings.from_mapping({"FILES_DIR": "/x", "BATCH_LEASE_SECONDS": 5.0})
    assert (conf.files_dir, conf.batch_lease_seconds) == ("/x", 5.0)
