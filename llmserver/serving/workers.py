"""`rungateway --workers N`: one listening socket, N daphne processes accepting on it.

The parent binds the socket once and starts each worker as `rungateway --fd N` with the socket
inherited (daphne's `fd:` endpoint); the kernel spreads the connections between them. A worker
that dies is started again (after a pause if it died young, so a broken start-up does not spin).
SIGTERM or SIGINT is passed on to every worker, which drains as a single gateway does, and the
parent waits for them. The workers share one scheduler through Redis (`SCHEDULER_TRANSPORT=redis`
is set for them), which is why more than one needs REDIS_URL.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from types import FrameType

log = logging.getLogger(__name__)
ROOT = Path(__file__).resolve().parents[2]
YOUNG_SECONDS = 2.0  # a worker that dies sooner is restarted after this pause
POLL_SECONDS = 0.2
STOP_GRACE_SECONDS = 120.0


def listen(host: str, port: int, backlog: int = 1024) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(backlog)
    sock.set_inheritable(True)
    return sock


class Supervisor:
    """Keeps `count` workers serving on `sock` until told to stop."""

    def __init__(self, sock: socket.socket, count: int, env: dict[str, str]) -> None:
        self.sock, self.count = sock, count
        self.env = {**env, "SCHEDULER_TRANSPORT": "redis"}
        self.workers: dict[int, tuple[subprocess.Popen[bytes], float]] = {}
        self.stopping = False

    def spawn(self, slot: int) -> None:
        fd = self.sock.fileno()
        command = [sys.executable, "manage.py", "rungateway", "--fd", str(fd)]
        process = subprocess.Popen(command, cwd=ROOT, env=self.env, pass_fds=(fd,))
        self.workers[slot] = (process, time.monotonic())
        log.info("worker %d started (pid %d)", slot, process.pid)

    def run(self) -> int:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, self._on_signal)
        for slot in range(self.count):
            self.spawn(slot)
        while not self.stopping:
            time.sleep(POLL_SECONDS)
            self.restart_dead()
        return self.wait_all()

    def restart_dead(self) -> None:
        for slot, (process, started) in list(self.workers.items()):
            code = process.poll()
            if code is None or self.stopping:
                continue
            log.warning("worker %d (pid %d) exited with %s; restarting it", slot, process.pid, code)
            if time.monotonic() - started < YOUNG_SECONDS:
                time.sleep(YOUNG_SECONDS)
            self.spawn(slot)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stopping = True
        for process, _ in self.workers.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)

    def wait_all(self) -> int:
        worst = 0
        for process, _ in self.workers.values():
            try:
                code = process.wait(timeout=STOP_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                process.kill()
                code = process.wait()
            worst = worst or code
        self.sock.close()
        return worst


def serve_workers(host: str, port: int, count: int) -> int:
    """Bind, supervise `count` workers until SIGTERM/SIGINT; the exit status."""
    with listen(host, port) as sock:
        return Supervisor(sock, count, dict(os.environ)).run()
