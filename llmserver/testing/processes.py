"""The gateway as a real daphne process on loopback, for end-to-end tests and benchmarks.

Each runs on a free 127.0.0.1 port with its own database (a fresh SQLite file, or a fresh
PostgreSQL database when DATABASE_URL points at PostgreSQL), and is stopped by whoever started it.
The simulator has its own launcher (`simulator.launcher`).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import httpx

from simulator.launcher import free_port

ROOT = Path(__file__).resolve().parents[2]


def wait_healthy(url: str, process: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"{process.args!r} exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=1.0).status_code < 500:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.1)
    raise RuntimeError(f"{url} did not answer within {timeout} s")


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait(timeout=5)


class Database:
    """A throwaway database for another process: SQLite file, or PostgreSQL if that is in use."""

    def __init__(self, tmp: Path) -> None:
        base = os.environ.get("DATABASE_URL", "")
        self._pg_admin = None
        if base.startswith(("postgres://", "postgresql://")):
            import psycopg

            self.name = f"llmserver_e2e_{uuid.uuid4().hex[:10]}"
            parts = urlsplit(base)
            self._pg_admin = base
            with psycopg.connect(base, autocommit=True) as conn:
                conn.execute(f'CREATE DATABASE "{self.name}"')
            self.url = urlunsplit(parts._replace(path="/" + self.name))
        else:
            self.url = f"sqlite:///{tmp / 'e2e.sqlite3'}"

    def drop(self) -> None:
        if self._pg_admin is None:
            return
        import psycopg

        with psycopg.connect(self._pg_admin, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{self.name}" WITH (FORCE)')


def manage(env: dict[str, str], *args: str) -> str:
    """Run a management command against the gateway's database; its stdout."""
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


@dataclass
class GatewayProcess:
    url: str
    process: subprocess.Popen[bytes]
    env: dict[str, str]
    demo: dict[str, Any] = field(default_factory=dict)

    def key(self, user: str) -> str:
        return str(next(k["key"] for k in self.demo["keys"] if k["user"] == user))

    def manage(self, *args: str) -> str:
        return manage(self.env, *args)

    def stop(self) -> None:
        stop(self.process)


def start_gateway(
    database_url: str,
    simulator_url: str,
    extra_env: dict[str, str] | None = None,
    *,
    daphne_args: Sequence[str] = (),
    quiet: bool = False,
    rungateway: bool = False,
    rungateway_args: Sequence[str] = (),
    setup: Sequence[Sequence[str]] = (),
) -> GatewayProcess:
    """Migrate, load the demo and serve with daphne; `quiet` drops daphne's stdout (the access
    log at daphne's default verbosity) and the gateway's JSON access log, `daphne_args` are added to its command line. With
    `rungateway`, serve through `manage.py rungateway` (the gateway's own server settings: read
    deadlines, OpenAI-shaped refusals) instead of the bare daphne command, with
    `rungateway_args` added. `setup` are manage.py commands run after the demo and before serving
    (e.g. `add_backend`)."""
    env = {
        **os.environ,
        "DATABASE_URL": database_url,
        "SECRET_KEY": "e2e-secret",
        "USAGE_FLUSH_INTERVAL": "0.1",
        **({"ACCESS_LOG": "false"} if quiet else {}),
        **(extra_env or {}),
    }
    env.pop("DJANGO_SETTINGS_MODULE", None)
    manage(env, "migrate", "--noinput", "-v0")
    # The demo's secrets go to a private file, never to the developer's `.demo-keys.json`.
    keys_file = Path(tempfile.mkdtemp(prefix="llmserver-demo-")) / "keys.json"
    demo = json.loads(
        manage(
            env, "demo", "--json", "--simulator-url", simulator_url, "--keys-file", str(keys_file)
        )
    )
    for command in setup:
        manage(env, *command)
    return serve(env, demo, daphne_args, quiet, rungateway, rungateway_args)


def start_peer(gateway: GatewayProcess, extra_env: dict[str, str] | None = None) -> GatewayProcess:
    """Another gateway process on the same database (already migrated, demo loaded), e.g. a
    second member of a cluster; its own free port."""
    return serve({**gateway.env, **(extra_env or {})}, gateway.demo, (), True, False, ())


def serve(
    env: dict[str, str],
    demo: dict[str, Any],
    daphne_args: Sequence[str],
    quiet: bool,
    rungateway: bool,
    rungateway_args: Sequence[str],
) -> GatewayProcess:
    port = free_port()
    if rungateway:
        command = [sys.executable, "manage.py", "rungateway", "--host", "127.0.0.1"]
        command += ["--port", str(port), *rungateway_args]
    else:
        command = [str(Path(sys.executable).with_name("daphne")), "-b", "127.0.0.1"]
        command += ["-p", str(port), *daphne_args, "llmserver.asgi:application"]
    process = subprocess.Popen(
        command,
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL if quiet else None,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(url + "/healthz", process)
    except Exception:
        stop(process)
        raise
    return GatewayProcess(url, process, env, demo)
