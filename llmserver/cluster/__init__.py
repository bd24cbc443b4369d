"""Several gateway processes, one scheduler: the transport between relays and the scheduler
service, and leadership by a Redis lease with a fencing token (`docs/DEPLOYMENT.md`)."""
