"""`python -m llmserver.backends.simulator --port 8100 ...`: the simulator without Django."""

from __future__ import annotations

from llmserver.backends.simulator.cli import main

main()
