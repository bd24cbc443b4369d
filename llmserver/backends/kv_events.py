"""A backend's KV cache events over ZeroMQ: subscribe, decode, hand them to the scheduler.

The wire is vLLM's (`vllm/distributed/kv_events.py`, `ZmqEventPublisher`; SGLang's
`python/sglang/srt/disaggregation/kv_events.py` copies it): a PUB socket bound at the
`--kv-events-config` endpoint sends three frames per batch, the topic, an 8-byte big-endian
sequence number and a msgpack `KVEventBatch` (`[ts, events, data_parallel_rank?]`). Each event is
a tagged msgspec struct: `["BlockStored", block_hashes, parent_block_hash, token_ids,
block_size, lora_id, medium, ...]`, `["BlockRemoved", block_hashes, medium, ...]`,
`["AllBlocksCleared"]` (array-like; fields may be added at the end), or the same as a map with
a `type` key (structs without `array_like`). Block hashes are ints or bytes.

Only the device tier counts (`medium` absent, None or "GPU"): blocks offloaded to CPU or disk do
not make a prefill cheap the way resident ones do. Blocks cached for a LoRA adapter (`lora_id`,
`lora_name`) serve only that adapter's prompts, and are left out too. A gap in the sequence
numbers is logged and counted; the index then lacks what was missed (the routing history still
covers it). A sequence number that goes back means the backend restarted: its cache is empty,
and the index is cleared.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Sequence
from typing import Any

import msgspec
import zmq
import zmq.asyncio

from scheduling import AllBlocksCleared, BlocksRemoved, BlocksStored, CacheEvent

log = logging.getLogger(__name__)
RETRY_SECONDS = 5.0

_DEVICE = (None, "GPU")
_TOKEN_MIN, _TOKEN_MAX = -(2**31), 2**31 - 1
# Each event's fields in array order, after its tag (vLLM's struct order; later fields ignored).
_FIELDS = {
    "BlockStored": (
        "block_hashes",
        "parent_block_hash",
        "token_ids",
        "block_size",
        "lora_id",
        "medium",
        "lora_name",
    ),
    "BlockRemoved": ("block_hashes", "medium"),
    "AllBlocksCleared": (),
}


class MalformedBatch(ValueError):
    pass


def _fields(raw: Any) -> tuple[str, dict[str, Any]]:
    """An event's tag and fields, from either encoding; fields left out (msgspec omits trailing
    defaults) read as None."""
    if isinstance(raw, list) and raw and isinstance(raw[0], str):
        return raw[0], dict(zip(_FIELDS.get(raw[0], ()), raw[1:], strict=False))
    if isinstance(raw, dict) and isinstance(raw.get("type"), str):
        return raw["type"], raw
    raise MalformedBatch(f"not a KV cache event: {raw!r:.80}")


def _hashes(value: Any) -> tuple[int | bytes, ...]:
    if not isinstance(value, list) or not all(isinstance(h, int | bytes) for h in value):
        raise MalformedBatch("block_hashes must be a list of ints or bytes")
    return tuple(value)


def decode_batch(payload: bytes) -> list[CacheEvent]:
    """One published batch as the scheduler's events (device-tier only)."""
    try:
        batch = msgspec.msgpack.decode(payload)
    except msgspec.DecodeError as exc:
        raise MalformedBatch(str(exc)) from exc
    if not isinstance(batch, list | dict):
        raise MalformedBatch("a batch is an array or a map")
    raw_events = batch[1] if isinstance(batch, list) and len(batch) > 1 else None
    if isinstance(batch, dict):
        raw_events = batch.get("events")
    if not isinstance(raw_events, list):
        raise MalformedBatch("a batch carries a list of events")
    events: list[CacheEvent] = []
    for raw in raw_events:
        tag, f = _fields(raw)
        if tag == "AllBlocksCleared":
            events.append(AllBlocksCleared())
        elif f.get("medium") not in _DEVICE or f.get("lora_id") or f.get("lora_name"):
            continue  # offloaded, or an adapter's blocks: no use to the base model's prompts
        elif tag == "BlockStored":
            tokens, size = f.get("token_ids"), f.get("block_size")
            parent = f.get("parent_block_hash")
            if not isinstance(tokens, list) or not all(
                isinstance(t, int) and _TOKEN_MIN <= t <= _TOKEN_MAX for t in tokens
            ):
                raise MalformedBatch("token_ids must be a list of 32-bit ints")
            if not isinstance(size, int) or size < 1:
                raise MalformedBatch("block_size must be a positive int")
            if parent is not None and not isinstance(parent, int | bytes):
                raise MalformedBatch("parent_block_hash must be an int, bytes or null")
            events.append(BlocksStored(_hashes(f.get("block_hashes")), parent, tuple(tokens), size))
        elif tag == "BlockRemoved":
            events.append(BlocksRemoved(_hashes(f.get("block_hashes"))))
    return events


class KvEventSubscriber:
    """One backend's event stream, for as long as the task runs: reconnects by itself (ZeroMQ
    does), so a restarted backend is heard again without the gateway doing anything. It connects
    to a publisher that binds, or with `bind` binds the endpoint for a publisher that connects:
    vLLM binds only a wildcard or ipc endpoint and connects to any other (`_is_bind_endpoint` in
    `vllm/distributed/kv_events.py`)."""

    def __init__(
        self,
        name: str,
        endpoint: str,
        apply: Callable[[str, list[CacheEvent]], None],
        topic: bytes = b"",
        bind: bool = False,
    ) -> None:
        self.name = name
        self.endpoint = endpoint
        self.bind = bind
        self.apply = apply
        self.topic = topic
        self.received = 0
        self.missed = 0
        self.malformed = 0
        self._last_seq: int | None = None

    def handle(self, frames: Sequence[bytes]) -> None:
        """One message's frames: topic, sequence number, payload."""
        if len(frames) != 3 or len(frames[1]) != 8:
            self.malformed += 1
            log.warning("kv events from %s: a message of %d frames", self.name, len(frames))
            return
        seq = int.from_bytes(frames[1], "big")
        restarted = self._last_seq is not None and seq <= self._last_seq
        gap = 0 if self._last_seq is None else seq - self._last_seq - 1
        if gap > 0:
            self.missed += gap
            log.warning("kv events from %s: missed %d batches", self.name, gap)
        self._last_seq = seq
        if restarted:
            # A publisher numbers its batches from 0: this is a new engine, with an empty cache
            # (a restarted vLLM says nothing else about the cache its predecessor held).
            log.warning("kv events from %s: the publisher restarted", self.name)
            self._apply([AllBlocksCleared()])
        try:
            events = decode_batch(frames[2])
        except MalformedBatch as exc:
            self.malformed += 1
            log.warning("kv events from %s: malformed batch: %s", self.name, exc)
            return
        self.received += 1
        if events:
            self._apply(events)

    def _apply(self, events: list[CacheEvent]) -> None:
        """A batch the scheduler could not take is logged and counted, never the end of the
        subscription."""
        try:
            self.apply(self.name, events)
        except Exception:
            self.malformed += 1
            log.exception("kv events from %s: a batch could not be applied", self.name)

    async def run(self) -> None:
        """Subscribe until cancelled; an endpoint ZeroMQ refuses is logged and tried again
        every RETRY_SECONDS (an operator may fix it in the admin meanwhile)."""
        context = zmq.asyncio.Context.instance()
        while True:
            socket = context.socket(zmq.SUB)
            try:
                socket.setsockopt(zmq.LINGER, 0)
                socket.setsockopt(zmq.SUBSCRIBE, self.topic)
                if self.bind:
                    socket.bind(self.endpoint)
                else:
                    socket.connect(self.endpoint)
                while True:
                    self.handle(await socket.recv_multipart())
            except zmq.ZMQError as exc:
                log.warning("kv events from %s at %s: %s", self.name, self.endpoint, exc)
            finally:
                socket.close()
            await asyncio.sleep(RETRY_SECONDS)
