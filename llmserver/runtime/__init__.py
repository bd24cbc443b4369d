"""The gateway process: its scheduler, backend clients, pollers, usage writer and metrics."""
