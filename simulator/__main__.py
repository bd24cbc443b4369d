"""`python -m simulator --port 8100 ...`: the simulator without Django."""

from __future__ import annotations

from simulator.cli import main

main()
