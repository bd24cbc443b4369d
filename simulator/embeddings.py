"""POST /v1/embeddings as vLLM 0.32 serves it for an embedding (pooling) model.

Read in vLLM 0.32: the route in `vllm/entrypoints/pooling/embed/api_router.py`; the request
(`EmbeddingRequest`, a union of completion-style `input` and chat-style `messages` requests) and
response models in `vllm/entrypoints/pooling/embed/protocol.py` and `pooling/base/protocol.py`;
the serving flow in `pooling/base/serving.py` and `pooling/embed/serving.py`; the encodings and
usage in `pooling/utils.py` and `vllm/utils/serial_utils.py`; `dimensions` in
`vllm/pooling_params.py`.

- `input`: a string, a list of strings, a list of token ids, a list of lists of token ids (or
  chat messages, in `input` or `messages`, rendered without the generation prompt). Each
  prompt is its own engine request (`embd-<id>-<i>`): it takes a batch slot for its prefill
  step, counts in `vllm:prompt_tokens_total`, and generates nothing. No prompt at all is a 400
  "You must pass at least one prompt"; a prompt longer than the context is the renderer's 400.
- The vector: 64 float32 numbers fixed by the prompt's tokens (each token's hashed vector,
  summed, then L2-normalised, as an embedding model's pooler normalises), so one text always
  gets one vector and texts sharing words point the same way. Token ids are tokens too.
- `encoding_format`: "float" (a list), "base64" (the float32 bytes, native = little endian,
  base64), "bytes" and "bytes_only" (the raw bytes as `application/octet-stream`, with, for
  "bytes", a `metadata` header holding the JSON the body would have had); `embed_dtype`
  float32, float16 or bfloat16 and `endianness` apply to the last three, as in vLLM. The fp8
  dtypes are not modelled (a 400 that says so).
- `dimensions`: the simulator's model is not a Matryoshka model, and vLLM refuses any
  `dimensions` for such a model: 400 "Model 'NAME' does not support Matryoshka embeddings;
  dimensions must be unset (received dimensions=N)." (`PoolingParams._set_default_parameters`).
- The body: `{"id": "embd-...", "object": "list", "created", "model", "data": [{"index", "object":
  "embedding", "embedding"}], "usage": {"prompt_tokens", "total_tokens", "completion_tokens": 0,
  "prompt_tokens_details": null, "completion_tokens_details": null}}` (pydantic's `model_dump`
  of `EmbeddingResponse`, nulls included).
- The model name is not checked: the pooling server's `_check_model` returns None for any name
  (`PoolingBaseServing._check_model` in `pooling/base/serving.py`), and the body names the
  served model. Removed parameters are refused as vLLM refuses them (`normalize`).
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import struct
import time
import uuid
from dataclasses import dataclass
from typing import Any

from simulator.protocol import (
    ModelSpec,
    RequestError,
    bool_field,
    chat_prompt,
    check_context,
    int_field,
    json_body,
    missing,
    tokenize,
    validation_error,
    vllm_error,
)

DIMENSIONS = 64
ENCODINGS = ("float", "base64", "bytes", "bytes_only")
DTYPES = ("float32", "float16", "bfloat16", "fp8_e4m3", "fp8_e5m2")
ENDIANNESS = ("native", "big", "little")
_DTYPE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}


@dataclass(frozen=True, slots=True)
class EmbeddingRequest:
    prompts: list[list[str]]
    encoding_format: str = "float"
    embed_dtype: str = "float32"
    endianness: str = "native"
    priority: int = 0


def _literal(body: dict[str, Any], field: str, choices: tuple[str, ...]) -> str:
    value = body.get(field, choices[0])
    if value not in choices:
        expected = ", ".join(repr(c) for c in choices[:-1]) + f" or {choices[-1]!r}"
        raise validation_error(field, "literal_error", f"Input should be {expected}", value)
    return str(value)


def _is_message(item: Any) -> bool:
    return isinstance(item, dict) and isinstance(item.get("role"), str)


def _prompts(body: dict[str, Any]) -> list[list[str]]:
    """Each prompt's tokens, from `messages` or `input` as vLLM's request union reads them."""
    add_generation_prompt = bool_field(body, "add_generation_prompt", False)
    conversations: list[list[Any]] | None = None
    source = body.get("messages", body.get("input"))
    if "messages" not in body and "input" not in body:
        raise missing("input", body)
    if isinstance(source, list) and source and all(_is_message(m) for m in source):
        conversations = [source]
    elif (
        isinstance(source, list)
        and source
        and all(isinstance(c, list) and c and all(_is_message(m) for m in c) for c in source)
    ):
        conversations = source
    if conversations is not None:
        return [tokenize(chat_prompt(c, add_generation_prompt)) or ["<s>"] for c in conversations]
    if "messages" in body:
        raise validation_error("messages", "list_type", "Input should be a valid list", source)
    if isinstance(source, str):
        return [tokenize(source) or ["<s>"]]
    if isinstance(source, list) and all(isinstance(t, int) and t >= 0 for t in source):
        return [[str(t) for t in source]] if source else []
    if isinstance(source, list) and all(isinstance(t, str) for t in source):
        return [tokenize(t) or ["<s>"] for t in source]
    if isinstance(source, list) and all(
        isinstance(p, list) and all(isinstance(t, int) and t >= 0 for t in p) for p in source
    ):
        return [[str(t) for t in p] or ["<s>"] for p in source]
    raise validation_error(
        "input", "union_type", "Input should be a string or a list of strings or token ids", source
    )


def parse(raw: bytes, spec: ModelSpec) -> EmbeddingRequest:
    body = json_body(raw)
    if "normalize" in body:
        raise vllm_error(
            "Parameter `normalize` was removed; use `use_activation` instead.", "normalize"
        )
    prompts = _prompts(body)
    encoding = _literal(body, "encoding_format", ENCODINGS)
    dtype = _literal(body, "embed_dtype", DTYPES)
    endianness = _literal(body, "endianness", ENDIANNESS)
    dimensions = int_field(body, "dimensions", None)
    priority = int_field(body, "priority", 0) or 0
    if not prompts:
        raise RequestError(400, "You must pass at least one prompt")
    for prompt in prompts:
        check_context(len(prompt), None, "max_tokens", spec.max_model_len)
    if dimensions is not None:
        raise RequestError(
            400,
            f"Model {spec.name!r} does not support Matryoshka embeddings; dimensions must be "
            f"unset (received dimensions={dimensions}).",
        )
    if dtype not in _DTYPE_BYTES:
        raise RequestError(400, f"The simulator does not model embed_dtype={dtype!r}.")
    return EmbeddingRequest(prompts, encoding, dtype, endianness, priority)


def embed(tokens: list[str]) -> list[float]:
    """The prompt's vector: its tokens' hashed vectors summed and L2-normalised, as float32."""
    total = [0.0] * DIMENSIONS
    for token in tokens:
        digest = hashlib.shake_128(token.encode()).digest(DIMENSIONS)
        for i, byte in enumerate(digest):
            total[i] += (byte - 127.5) / 127.5
    norm = math.sqrt(sum(v * v for v in total)) or 1.0
    return list(
        struct.unpack(f"<{DIMENSIONS}f", struct.pack(f"<{DIMENSIONS}f", *(v / norm for v in total)))
    )


def _bfloat16(values: list[float]) -> list[int]:
    """float32 to bfloat16 bits, rounding to nearest even as torch does."""
    out = []
    for bits in struct.unpack(f"<{len(values)}I", struct.pack(f"<{len(values)}f", *values)):
        out.append((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16)
    return out


def to_bytes(values: list[float], dtype: str, endianness: str) -> bytes:
    """`tensor2binary` (`vllm/utils/serial_utils.py`): the dtype's bytes in the given order
    ("native" is this machine's, little endian on x86)."""
    order = ">" if endianness == "big" else "<"
    if dtype == "float16":
        return struct.pack(f"{order}{len(values)}e", *values)
    if dtype == "bfloat16":
        return struct.pack(f"{order}{len(values)}H", *_bfloat16(values))
    return struct.pack(f"{order}{len(values)}f", *values)


def respond(req: EmbeddingRequest, model: str) -> tuple[bytes, list[tuple[bytes, bytes]], bytes]:
    """(content type, extra headers, body) for a finished request."""
    rid = f"embd-{uuid.uuid4().hex}"
    created = int(time.time())
    vectors = [embed(p) for p in req.prompts]
    n_tokens = sum(len(p) for p in req.prompts)
    if req.encoding_format in ("bytes", "bytes_only"):
        chunks = [to_bytes(v, req.embed_dtype, req.endianness) for v in vectors]
        headers: list[tuple[bytes, bytes]] = []
        if req.encoding_format == "bytes":
            items, offset = [], 0
            for i, chunk in enumerate(chunks):
                items.append(
                    {
                        "index": i,
                        "embed_dtype": req.embed_dtype,
                        "endianness": req.endianness,
                        "start": offset,
                        "end": offset + len(chunk),
                        "shape": [DIMENSIONS],
                    }
                )
                offset += len(chunk)
            usage = {"prompt_tokens": n_tokens, "total_tokens": n_tokens}
            metadata = {
                "id": rid,
                "created": created,
                "model": model,
                "data": items,
                "usage": usage,
            }
            headers.append((b"metadata", json.dumps(metadata).encode()))
        return b"application/octet-stream", headers, b"".join(chunks)
    data = []
    for i, vector in enumerate(vectors):
        value: list[float] | str = vector
        if req.encoding_format == "base64":
            value = base64.b64encode(to_bytes(vector, req.embed_dtype, req.endianness)).decode()
        data.append({"index": i, "object": "embedding", "embedding": value})
    body = {
        "id": rid,
        "object": "list",
        "created": created,
        "model": model,
        "data": data,
        "usage": {
            "prompt_tokens": n_tokens,
            "total_tokens": n_tokens,
            "completion_tokens": 0,
            "prompt_tokens_details": None,
            "completion_tokens_details": None,
        },
    }
    return b"application/json", [], json.dumps(body).encode()
