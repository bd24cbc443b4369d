"""A vLLM-faithful backend simulator: continuous batching engine, OpenAI-compatible ASGI app and
vLLM / TGI / SGLang metric expositions, for machines without a GPU."""
