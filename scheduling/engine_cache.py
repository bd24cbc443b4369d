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
backend, the least recently stored or built upon out first, so that events it never hears the
end of cannot grow it without bound.
"""

from __future__ import annotations

import hashlib
import struct
from collections import OrderedDict
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
    raw = struct.pack(f">{len(tokens)}i", *tokens)
    return int.from_bytes(hashlib.blake2b(seed + raw, digest_size=8).digest(), "big")


def _advance(
    last: int | None, pending: tuple[int, ...], tokens: Sequence[int]
) -> tuple[int | None, tuple[int, ...], tuple[int, ...]]:
    """The chain after `tokens`: its last full block, the tokens since, the blocks completed."""
    run = (*pending, *tokens) if pending else tokens
    full = len(run) // TOKEN_BLOCK * TOKEN_BLOCK
    completed = []
    for start in range(0, full, TOKEN_BLOCK):
        last = _next(last, run[start : start + TOKEN_BLOCK])
        completed.append(last)
    return last, tuple(run[full:]), tuple(completed)


def token_block_hashes(token_ids: Sequence[int]) -> tuple[int, ...]:
    """Chained hashes of the full `TOKEN_BLOCK`-token blocks at the start of a prompt (at most
    MAX_BLOCKS): hash i covers token_ids[: (i + 1) * TOKEN_BLOCK]."""
    return _advance(None, (), token_ids[: MAX_BLOCKS * TOKEN_BLOCK])[2]


@dataclass(slots=True)
class _Place:
    """Where the chain stands at the end of one engine block: the gateway's last full block,
    the tokens since it, the gateway blocks this engine block completed, and how many copies
    of it the engine holds (vLLM may cache one hash in several blocks, stored and evicted one
    by one: `BlockHashToBlockMap` in `vllm/v1/core/block_pool.py`)."""

    last: int | None
    pending: tuple[int, ...]
    completed: tuple[int, ...]
    copies: int = 1


@dataclass(slots=True)
class EngineCacheMirror:
    """Per backend, each cached engine block's place in the gateway's chain, least recently
    stored or built upon first."""

    limit: int = 262_144
    _places: dict[str, OrderedDict[EngineHash, _Place]] = field(default_factory=dict)
    skipped: int = 0  # stored blocks that could not be placed: unknown parent, or malformed

    def apply(self, backend: str, events: Iterable[CacheEvent], index: PrefixIndex) -> None:
        places = self._places.setdefault(backend, OrderedDict())
        for event in events:
            if isinstance(event, BlocksStored):
                self._stored(backend, places, event, index)
            elif isinstance(event, BlocksRemoved):
                for h in event.engine_hashes:
                    place = places.get(h)
                    if place is None:
                        continue
                    place.copies -= 1
                    if place.copies <= 0:
                        del places[h]
                        index.remove(backend, place.completed)
            else:
                places.clear()
                index.clear(backend)

    def _stored(
        self,
        backend: str,
        places: OrderedDict[EngineHash, _Place],
        event: BlocksStored,
        index: PrefixIndex,
    ) -> None:
        size = event.block_size
        if len(event.token_ids) != len(event.engine_hashes) * size:
            self.skipped += len(event.engine_hashes)  # tokens that cannot be told apart by block
            return
        if event.parent is None:
            place = _Place(None, (), ())
        elif (found := places.get(event.parent)) is not None:
            place = found
            places.move_to_end(event.parent)  # built upon: a hot root stays
        else:
            self.skipped += len(event.engine_hashes)
            return
        held: list[int] = []
        for i, h in enumerate(event.engine_hashes):
            known = places.get(h)
            if known is not None:  # another copy of a block it holds
                known.copies += 1
                places.move_to_end(h)
                place = known
            else:
                tokens = event.token_ids[i * size : (i + 1) * size]
                place = _Place(*_advance(place.last, place.pending, tokens))
                places[h] = place
            held += place.completed
        while len(places) > self.limit:
            places.popitem(last=False)
        index.hold(backend, held)

    def forget(self, keep: set[str]) -> None:
        """Drop backends no longer configured."""
        for name in set(self._places) - keep:
            del self._places[name]

    def size(self, backend: str) -> int:
        return len(self._places.get(backend, ()))
