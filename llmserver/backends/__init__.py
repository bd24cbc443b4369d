"""Everything the gateway needs to talk to inference backends: the simulator, the metrics
scraper and the upstream HTTP client. Imports nothing from Django."""
