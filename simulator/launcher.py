"""The one way to start the simulator as a process: `rungateway`, the tests and the benchmarks.

`start_simulator("--max-num-seqs", "2", speed=10)` returns once /health answers; `stop()`
terminates it (and kills it if it lingers). Runs `python -m simulator`, so Django is never loaded
in the child.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from typing import IO

import httpx


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return int(s.getsockname()[1])


@dataclass
class RunningSimulator:
    url: str
    port: int
    process: subprocess.Popen[bytes]

    @property
    def metrics_url(self) -> str:
        return f"{self.url}/metrics"

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)

    def __enter__(self) -> RunningSimulator:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def start_simulator(
    *args: str,
    speed: float | None = None,
    host: str = "127.0.0.1",
    port: int | None = None,
    quiet: bool = True,
    startup_timeout: float = 30.0,
) -> RunningSimulator:
    """Extra `args` are the CLI's flags, e.g. ("--max-num-seqs", "2", "--format", "tgi").

    `quiet` sends the child's output to a file, not a pipe: an unread pipe fills up (daphne logs
    every abort) and then blocks the simulator mid-write; the file is shown if start-up fails.
    A free port picked here can be taken by another process before the simulator binds it (many
    servers start at once in the test suite): then it starts again on another, up to three times.
    """
    for attempt in range(3):
        chosen = port or free_port(host)
        try:
            return _start(chosen, host, args, speed, quiet, startup_timeout)
        except PortTaken:
            if port is not None or attempt == 2:
                raise
    raise AssertionError("unreachable")


class PortTaken(RuntimeError):
    """The port was bound by another process between its choice and the simulator's start."""


def _start(
    port: int,
    host: str,
    args: tuple[str, ...],
    speed: float | None,
    quiet: bool,
    startup_timeout: float,
) -> RunningSimulator:
    cmd = [sys.executable, "-m", "simulator", "--host", host, "--port", str(port), *args]
    if speed is not None:
        cmd += ["--speed", str(speed)]
    log: IO[bytes] | None = tempfile.TemporaryFile() if quiet else None  # noqa: SIM115
    proc = subprocess.Popen(cmd, stdout=log, stderr=log)
    sim = RunningSimulator(f"http://{host}:{port}", port, proc)
    deadline = time.monotonic() + startup_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            output = _tail(log)
            error = PortTaken if "Address already in use" in output else RuntimeError
            raise error(f"simulator exited with {proc.returncode}: {output}")
        try:
            if httpx.get(f"{sim.url}/health", timeout=0.5).status_code == 200:
                return sim
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    sim.stop()
    raise TimeoutError(f"simulator did not answer /health on port {port}: {_tail(log)}")


def _tail(log: IO[bytes] | None) -> str:
    if log is None:
        return "(output shown above)"
    log.seek(0)
    return log.read().decode(errors="replace")[-2000:]
