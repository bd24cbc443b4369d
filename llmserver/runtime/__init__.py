"""The gateway process's long-lived state: the `Gateway` wiring its scheduler transport, backend
pool, configuration watch, key cache, admission limits, usage writer and telemetry."""
