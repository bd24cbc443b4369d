"""What a backend's own prefix cache holds, as its KV cache events tell it.

vLLM (`--kv-events-config`) and SGLang publish, per engine step, the blocks their prefix cache
stored and evicted (`BlockStored`, `BlockRemoved`, `AllBlocksCleared` in
`vllm/distributed/kv_events.py`, `python/sglang/srt/disaggregation/kv_events.py`). A stored
event names its blocks by the engine's own hashes (seeded per process, so the gateway cannot
recompute them) and carries their token ids, the block size and the parent block's hash.

The gateway keys prompts by its own chained hashes of `TOKEN_BLOCK`-token blocks
(`token_block_hashes`, over the ids the backend's `/tokenize` returns), whatever the engine's
block size: vLLM's is 16 by default, SGLang's page is often 1 token. `EngineCacheMirror` follows
each engine block's place in the gateway's chain (the last full block's hash and the tokens of
the block being filled), so a stored event becomes the gateway's hashes of the blocks it
completes, recorded in the `PrefixIndex`; an eviction removes them again; a cleared cache
clears the backend. A stored block whose parent the mirror never saw (stored before the gateway
subscribed, or in a batch it missed) cannot be placed in the chain and is skipped: the
gateway's routing history still covers it. The mirror keeps at most `limit` engine blocks per
backend, oldest out, so that events it never hears the end of cannot grow it without bound.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from scheduling.prefix_index import MAX_BLOCKS, PrefixIndex

TOKEN_BLOCK = 16
_SEED = b"llmserver-tokens"

EngineHash = int | bytes


@dataclass(frozen=True, slots=True)
class BlocksStored:
    engine_hashes: tuple[EngineHash, ...]
    parent: EngineHash | None
    token_ids: tuple[int, ...]
    block_size: int


@dataclass(frozen=True, slots=True)
class BlocksRemoved:
    engine_hashes: tuple[EngineHash, ...]


@dataclass(frozen=True, slots=True)
class AllBlocksCleared:
    pass


CacheEvent = BlocksStored | BlocksRemoved | AllBlocksCleared


def _next(parent: int | None, tokens: Sequence[int]) -> int:
    seed = _SEED if parent is None else parent.to_bytes(8, "big")
    raw = b"".join(t.to_bytes(4, "big", signed=True) for t in tokens)
    return int.from_bytes(hashlib.blake2b(seed + raw, digest_size=8).digest(), "big")


def token_block_hashes(token_ids: Sequence[int]) -> tuple[int, ...]:
    """Chained hashes of the full `TOKEN_BLOCK`-token blocks at the start of a prompt (at most
    MAX_BLOCKS): hash i covers token_ids[: (i + 1) * TOKEN_BLOCK]."""
    out: list[int] = []
    last: int | None = None
    for start in range(
        0, min(len(token_ids) // TOKEN_BLOCK, MAX_BLOCKS) * TOKEN_BLOCK, TOKEN_BLOCK
    ):
        last = _next(last, token_ids[start : start + TOKEN_BLOCK])
        out.append(last)
    return tuple(out)


@dataclass(frozen=True, slots=True)
class _Place:
    """Where the chain stands at the end of one engine block: the gateway's last full block,
    the tokens since it, and the gateway blocks this engine block completed."""

    last: int | None
    pending: tuple[int, ...]
    completed: tuple[int, ...]


@dataclass(slots=True)
class EngineCacheMirror:
    """Per backend, each cached engine block's place in the gateway's chain."""

    limit: int = 262_144
    _places: dict[str, dict[EngineHash, _Place]] = field(default_factory=dict)
    skipped: int = 0  # stored blocks whose parent was unknown

    def apply(
        self, backend: str, events: Iterable[CacheEvent], index: PrefixIndex, now: float
    ) -> None:
        places = self._places.setdefault(backend, {})
        for event in events:
            if isinstance(event, BlocksStored):
                self._stored(backend, places, event, index, now)
            elif isinstance(event, BlocksRemoved):
                for h in event.engine_hashes:
                    gone = places.pop(h, None)
                    if gone is not None:
                        index.remove(backend, gone.completed)
            else:
                places.clear()
                index.clear(backend)

    def _stored(
        self,
        backend: str,
        places: dict[EngineHash, _Place],
        event: BlocksStored,
        index: PrefixIndex,
        now: float,
    ) -> None:
        if event.parent is None:
            place = _Place(None, (), ())
        elif (found := places.get(event.parent)) is not None:
            place = found
        else:
            self.skipped += len(event.engine_hashes)
            return
        size = event.block_size
        new: list[int] = []
        for i, h in enumerate(event.engine_hashes):
            last, pending = place.last, place.pending
            completed: list[int] = []
            for token in event.token_ids[i * size : (i + 1) * size]:
                pending += (token,)
                if len(pending) == TOKEN_BLOCK:
                    last, pending = _next(last, pending), ()
                    completed.append(last)
            place = _Place(last, pending, tuple(completed))
            places[h] = place
            new += completed
        while len(places) > self.limit:
            del places[next(iter(places))]
        index.record(backend, new, now)

    def forget(self, keep: set[str]) -> None:
        """Drop backends no longer configured."""
        for name in set(self._places) - keep:
            del self._places[name]

    def size(self, backend: str) -> int:
        return len(self._places.get(backend, ()))
