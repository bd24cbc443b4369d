"""Start the simulator as a subprocess on a free loopback port, for tests and benchmarks.

`start_simulator("--max-num-seqs", "2", speed=10)` returns once /health answers; `stop()`
terminates it (and kills it if it lingers). Runs `python -m llmserver.backends.simulator`, so
Django is not loaded in the child.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
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
    *args: str, speed: float = 1.0, port: int | None = None, startup_timeout: float = 15.0
) -> RunningSimulator:
    """Extra `args` are the CLI's flags, e.g. ("--max-num-seqs", "2", "--format", "tgi")."""
    port = port or free_port()
    cmd = [
        sys.executable,
        "-m",
        "llmserver.backends.simulator",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--speed",
        str(speed),
        *args,
    ]
    # stderr goes to a file, not a pipe: an unread pipe fills up (daphne logs every abort) and
    # then blocks the simulator mid-write.
    log = tempfile.TemporaryFile()  # noqa: SIM115  (lives as long as the process)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log)
    sim = RunningSimulator(f"http://127.0.0.1:{port}", port, proc)
    deadline = time.monotonic() + startup_timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            log.seek(0)
            err = log.read().decode(errors="replace")
            raise RuntimeError(f"simulator exited with {proc.returncode}: {err[-2000:]}")
        try:
            if httpx.get(f"{sim.url}/health", timeout=0.5).status_code == 200:
                return sim
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    sim.stop()
    raise TimeoutError(f"simulator did not answer /health on port {port}")
