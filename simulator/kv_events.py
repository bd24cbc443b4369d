"""KV cache events on the wire, as vLLM publishes them with `--kv-events-config`.

`vllm/distributed/kv_events.py`: `KVEventsConfig` (`enable_kv_cache_events`, `publisher`
"zmq", `endpoint` "tcp://*:5557", `topic`); `ZmqEventPublisher` sends each batch as three
frames, the topic, the sequence number as 8 big-endian bytes and the msgpack encoding of a
`KVEventBatch`. The batch struct is array-like (`[ts, events]`); the events are tagged msgspec
structs encoded as maps with a `type` key (current vLLM; earlier versions and SGLang encode them
as arrays, which the gateway reads too). The engine publishes one batch per step that changed
the cache (`EngineCore` after `scheduler.update_from_output`).

The endpoint is bound only when it holds a wildcard (`*`, `::`) or is ipc/inproc, and otherwise
connected to (`ZmqEventPublisher._is_bind_endpoint`): given `tcp://127.0.0.1:5557`, the real
vLLM 0.32 connects there and a subscriber that binds hears it (`tests/vllm/
test_vllm_kv_events.py`). Tests whose subscribers connect give the simulator an `ipc://` path.
Not modelled: the replay socket (`replay_endpoint`), the high-water mark, and data-parallel
ranks (vLLM adds the rank to the port, `offset_endpoint_port`).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass

import msgspec
import zmq

from simulator.prefix_cache import CacheEvent, Stored


class BlockStored(msgspec.Struct, omit_defaults=True, tag=True):
    block_hashes: list[bytes]
    parent_block_hash: bytes | None
    token_ids: list[int]
    block_size: int
    lora_id: int | None
    medium: str | None
    lora_name: str | None = None


class BlockRemoved(msgspec.Struct, omit_defaults=True, tag=True):
    block_hashes: list[bytes]
    medium: str | None


class KVEventBatch(msgspec.Struct, array_like=True, omit_defaults=True):
    ts: float
    events: list[BlockStored | BlockRemoved]


@dataclass(frozen=True, slots=True)
class KvEventsConfig:
    endpoint: str
    topic: str = ""

    @classmethod
    def parse(cls, raw: str) -> KvEventsConfig | None:
        """vLLM's `--kv-events-config` JSON; None when events are not enabled."""
        data = json.loads(raw)
        if not isinstance(data, dict) or not data.get("enable_kv_cache_events"):
            return None
        if data.get("publisher", "zmq") != "zmq":
            raise ValueError("only the zmq publisher is simulated")
        return cls(str(data.get("endpoint", "tcp://*:5557")), str(data.get("topic", "")))


def is_bind_endpoint(endpoint: str) -> bool:
    """vLLM's rule: bind a wildcard or an ipc/inproc endpoint, connect to any other."""
    return "*" in endpoint or "::" in endpoint or endpoint.startswith(("ipc://", "inproc://"))


class KvEventPublisher:
    def __init__(self, config: KvEventsConfig, block_size: int) -> None:
        self.block_size = block_size
        self._topic = config.topic.encode()
        self._seq = 0
        self._socket: zmq.Socket[bytes] = zmq.Context.instance().socket(zmq.PUB)
        self._socket.setsockopt(zmq.LINGER, 0)
        if is_bind_endpoint(config.endpoint):
            self._socket.bind(config.endpoint)
        else:
            self._socket.connect(config.endpoint)
        self._encoder = msgspec.msgpack.Encoder()

    def publish(self, events: list[CacheEvent]) -> None:
        if not events:
            return
        wire: list[BlockStored | BlockRemoved] = [
            BlockStored(e.block_hashes, e.parent, e.token_ids, self.block_size, None, "GPU")
            if isinstance(e, Stored)
            else BlockRemoved(e.block_hashes, "GPU")
            for e in events
        ]
        payload = self._encoder.encode(KVEventBatch(time.time(), wire))
        frames = (self._topic, self._seq.to_bytes(8, "big"), payload)
        self._socket.send_multipart(frames, flags=zmq.NOBLOCK)
        self._seq += 1

    def close(self) -> None:
        self._socket.close()
