"""The Django project and the gateway: OpenAI-compatible API, consumers, backends, metrics."""
