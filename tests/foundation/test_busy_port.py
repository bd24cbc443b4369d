"""A busy port stops `make run` before anything is changed, naming the port and the way out."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from collections.abc import Iterator

import pytest

from llmserver.testing.processes import ROOT


@pytest.fixture
def busy_port() -> Iterator[int]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        yield sock.getsockname()[1]


def rungateway(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "SECRET_KEY": "test", "DATABASE_URL": "sqlite:///:memory:"}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    return subprocess.run(
        [sys.executable, "manage.py", "rungateway", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_rungateway_exits_non_zero_naming_a_busy_gateway_port(busy_port):
    done = rungateway("--port", str(busy_port))
    assert done.returncode != 0
    assert f"Port {busy_port}" in done.stderr
    assert "make run PORT=" in done.stderr


def test_the_pre_check_names_a_busy_simulator_port(busy_port):
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        gateway_port = free.getsockname()[1]
    done = rungateway(
        "--check-ports", "--port", str(gateway_port), "--simulator-port", str(busy_port)
    )
    assert done.returncode != 0
    assert f"Port {busy_port}" in done.stderr and "SIM_PORT=" in done.stderr


def test_the_pre_check_passes_on_free_ports():
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    assert rungateway("--check-ports", "--port", str(port)).returncode == 0


def test_make_run_stops_on_a_busy_port_before_touching_the_demo(busy_port, tmp_path):
    if not (ROOT / ".venv" / "bin" / "python").exists():
        pytest.skip("make run needs the project's .venv")
    keys = ROOT / ".demo-keys.json"
    before = keys.read_bytes() if keys.exists() else None
    done = subprocess.run(
        ["make", "-s", "run", f"PORT={busy_port}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode != 0
    assert f"Port {busy_port}" in done.stderr + done.stdout
    assert (keys.read_bytes() if keys.exists() else None) == before
