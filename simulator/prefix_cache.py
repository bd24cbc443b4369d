"""An LRU cache of prompt-prefix blocks, as vLLM's automatic prefix caching.

A prompt is cut into full blocks of `block_tokens` tokens (vLLM's default block size on GPUs is
16); each block is named by a hash chained over everything before it, so a block hits only when
the whole prefix up to it matches (`hash_block_tokens`, `get_request_block_hasher` in
`vllm/v1/core/kv_cache_utils.py`). The hit is the run of leading cached blocks, at most
`num_tokens - 1` tokens: the last prompt token is always recomputed to get its logits
(`KVCacheManager.get_computed_blocks` in `vllm/v1/core/kv_cache_manager.py`, which also counts
the request's tokens as prefix-cache queries and the hit tokens as hits: the counters
`vllm:prefix_cache_queries` and `vllm:prefix_cache_hits` of `vllm/v1/metrics/loggers.py`).
Eviction is least recently used, and among one prompt's blocks the tail goes first, as in vLLM's
`FreeKVCacheBlockQueue` (freed blocks are appended in reverse order).

With `record_events`, the cache keeps what vLLM's block pool reports as KV cache events
(`BlockPool.cache_full_blocks` and `_maybe_evict_cached_block` in `vllm/v1/core/block_pool.py`):
one `BlockStored` per run of newly cached blocks of a prompt, naming the block before the run as
its parent and carrying the run's token ids, and one `BlockRemoved` per evicted block; the engine
takes them after each step (`take_events`) for its publisher.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Stored:
    block_hashes: list[bytes]
    parent: bytes | None
    token_ids: list[int]


@dataclass(frozen=True, slots=True)
class Removed:
    block_hashes: list[bytes]


CacheEvent = Stored | Removed


def block_hashes(tokens: Sequence[str], block_tokens: int) -> list[bytes]:
    digest = hashlib.blake2b(digest_size=12)
    hashes = []
    for start in range(0, len(tokens) - block_tokens + 1, block_tokens):
        digest.update("\x1f".join(tokens[start : start + block_tokens]).encode())
        digest.update(b"\x1e")
        hashes.append(digest.copy().digest())
    return hashes


class PrefixCache:
    def __init__(
        self,
        capacity_blocks: int,
        block_tokens: int = 16,
        token_id: Callable[[str], int] | None = None,
    ) -> None:
        self.capacity_blocks = capacity_blocks
        self.block_tokens = block_tokens
        self._blocks: OrderedDict[bytes, None] = OrderedDict()
        # Set: events are recorded, with token ids from this tokenizer.
        self._token_id = token_id
        self._events: list[CacheEvent] = []

    def take_events(self) -> list[CacheEvent]:
        events, self._events = self._events, []
        return events

    def _record_stored(self, tokens: Sequence[str], hashes: list[bytes]) -> None:
        """One Stored per run of blocks that were not cached before this prompt."""
        if self._token_id is None:
            return
        size, run = self.block_tokens, None
        for i, h in enumerate(hashes):
            if h in self._blocks:
                run = None
                continue
            ids = [self._token_id(t) for t in tokens[i * size : (i + 1) * size]]
            if run is None:
                run = Stored([], hashes[i - 1] if i else None, [])
                self._events.append(run)
            run.block_hashes.append(h)
            run.token_ids.extend(ids)

    @property
    def enabled(self) -> bool:
        return self.capacity_blocks > 0

    def lookup_and_insert(self, tokens: Sequence[str]) -> int:
        """Cached tokens at the start of `tokens`; then the prompt's blocks become most recent."""
        if not self.enabled:
            return 0
        hashes = block_hashes(tokens, self.block_tokens)
        hittable = (len(tokens) - 1) // self.block_tokens
        hits = 0
        for h in hashes[:hittable]:
            if h not in self._blocks:
                break
            hits += 1
        self._record_stored(tokens, hashes)
        for h in reversed(hashes):
            self._blocks[h] = None
            self._blocks.move_to_end(h)
        while len(self._blocks) > self.capacity_blocks:
            evicted, _ = self._blocks.popitem(last=False)
            if self._token_id is not None:
                self._events.append(Removed([evicted]))
        return hits * self.block_tokens

    def __len__(self) -> int:
        return len(self._blocks)
