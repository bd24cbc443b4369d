"""Is a TCP port free to listen on? Asked before `make run` changes anything.

Daphne only logs "Address already in use" and exits 0; by then the demo data would have been
rewritten. Binding a socket ourselves first gives a clear, non-zero failure instead.
"""

from __future__ import annotations

import socket


class PortBusy(Exception):
    def __init__(self, host: str, port: int, what: str, variable: str) -> None:
        super().__init__(
            f"Port {port} on {host} is already in use, so the {what} cannot listen there. "
            f"Stop whatever holds it, or choose another: make run {variable}=<free port>"
        )
        self.port = port


def port_is_free(host: str, port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # As the server will bind: a port in TIME_WAIT after a restart is not "busy".
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def ensure_free(host: str, ports: dict[str, tuple[int, str]]) -> None:
    """`ports` maps what listens ("gateway") to (port, the make variable that sets it)."""
    for what, (port, variable) in ports.items():
        if not port_is_free(host, port):
            raise PortBusy(host, port, what, variable)
