"""Simulators on loopback for the backend tests, each stopped at teardown."""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from simulator.launcher import RunningSimulator, start_simulator


@pytest.fixture
def simulator() -> Iterator[Callable[..., RunningSimulator]]:
    """Start simulators with CLI flags; every one is stopped at teardown."""
    started: list[RunningSimulator] = []

    def start(*args: str, speed: float = 5.0) -> RunningSimulator:
        sim = start_simulator(*args, speed=speed)
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()
