"""Talking to inference backends: the pool (a client, metrics poller and KV event subscriber per
configured backend, and the prompt keyer asking their /tokenize), the upstream client, metrics
scraping by each kind's profile (`tenants.backend_kinds`), KV events and llama.cpp's capacity.
No module here imports Django itself; the simulator is its own package (`simulator`)."""
