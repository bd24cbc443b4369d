"""OpenAI's Batch API, executed by the gateway on the batch band.

`storage` keeps the bytes of files, `upload` takes a multipart upload into it, `validation`
checks a batch's input, `records` is the database side (files, batches, the runner's claims),
`objects` says it all in OpenAI's shapes, `results` writes a batch's output as it goes, `lines`
sends one line through the same pipeline as an HTTP request, and `runner` runs batches.
"""
