"""Serving the gateway: the daphne server with its client bounds, the drain on SIGTERM, the
workers sharing one socket, and the port check `make run` makes first (`rungateway`)."""
