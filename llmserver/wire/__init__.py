"""The OpenAI wire vocabulary the request path speaks: its errors, the validation of request
bodies, and server-sent events. Below the pipeline and the consumers, which both use it."""
