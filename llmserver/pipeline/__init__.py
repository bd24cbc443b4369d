"""One completion's way through the gateway, as a few named steps (see docs/ARCHITECTURE.md).

`admission` (may this key send this, in which band), `dispatch` (queue, wait for a backend, try
another one while nothing was sent), `relay` (the backend's answer to the client, counting what
was delivered), `accounting` (the slot, the fair-share correction, metrics and the usage row, on
every ending); `completion` strings them together for the HTTP and WebSocket consumers.
"""
