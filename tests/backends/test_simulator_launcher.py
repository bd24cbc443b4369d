"""Starting the simulator as a process: a port taken between its choice and the bind is not a
failure of the test that asked for a simulator."""

from __future__ import annotations

import socket

import pytest

from simulator import launcher


def test_a_port_taken_before_the_bind_is_retried_on_another(monkeypatch) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        ports = iter([taken, launcher.free_port("127.0.0.1")])
        monkeypatch.setattr(launcher, "free_port", lambda host: next(ports))
        sim = launcher.start_simulator()
        try:
            assert sim.port != taken
        finally:
            sim.stop()


def test_a_port_the_caller_chose_is_not_replaced() -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        with pytest.raises(launcher.PortTaken):
            launcher.start_simulator(port=busy.getsockname()[1])
