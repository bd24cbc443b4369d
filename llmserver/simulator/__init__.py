"""A backend simulator that behaves like vLLM under load, for machines without a GPU."""
