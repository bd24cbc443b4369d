"""llama.cpp's llama-server as a real process on loopback, for the real-engine tests and bench.

Started the way docs/BACKENDS.md tells an operator to: `--metrics` for the Prometheus endpoint
the gate reads, `-np` continuous-batching slots, `--host 127.0.0.1` and a free port.
"""

from __future__ import annotations

import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import httpx

from llmserver.backends.metrics import parse_samples
from llmserver.testing.llama_build import model_path, server_path
from llmserver.testing.processes import stop, wait_healthy
from simulator.launcher import free_port

# The name the engine answers to (--alias); the gateway routes its public model name to it.
ALIAS = "gemma-3-270m"


def missing() -> str | None:
    """Why the real engine cannot run here, or None when it can."""
    for what, path in (("llama-server", server_path()), ("model", model_path())):
        if not path.exists():
            return f"{what} not found at {path}: run `make realengine` (builds and assembles it)"
    return None


@dataclass
class LlamaServer:
    url: str
    process: subprocess.Popen[bytes]
    log: Path

    def metrics(self) -> dict[str, float]:
        """The engine's own counters and gauges, `llamacpp:` names."""
        response = httpx.get(self.url + "/metrics", headers={"accept": "text/plain"}, timeout=5)
        response.raise_for_status()
        return parse_samples(response.text)

    def busy(self) -> float:
        """Requests the engine holds, running or queued."""
        m = self.metrics()
        return m["llamacpp:requests_processing"] + m["llamacpp:requests_deferred"]

    def stop(self) -> None:
        stop(self.process)


def start_llama_server(slots: int = 4, context: int = 4096, *extra: str) -> LlamaServer:
    """`context` is shared by the slots (llama-server splits -c among -np)."""
    port = free_port()
    log = Path(tempfile.mkstemp(prefix="llama-server-", suffix=".log")[1])
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                str(server_path()),
                "-m",
                str(model_path()),
                "--alias",
                ALIAS,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "-np",
                str(slots),
                "-c",
                str(context),
                "--metrics",
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        # /health answers 503 while the model loads; wait for the 200.
        wait_ready(url, process)
    except Exception:
        stop(process)
        raise
    return LlamaServer(url, process, log)


def wait_ready(url: str, process: subprocess.Popen[bytes], timeout: float = 60.0) -> None:
    wait_healthy(url + "/health", process, timeout)  # it listens ...
    deadline = time.monotonic() + timeout
    while httpx.get(url + "/health", timeout=2).status_code != 200:  # ... then loads the model
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} did not load its model within {timeout} s")
        time.sleep(0.1)
