"""The OpenAI-compatible surface: validation, errors, the completion pipeline and its consumers."""
