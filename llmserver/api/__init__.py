"""The OpenAI-compatible surface: the Channels consumers, key authentication and the Batch API's
files; they speak `llmserver.wire` and drive `llmserver.pipeline`."""
