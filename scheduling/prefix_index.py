"""Which prompt prefixes each backend has recently seen, at block granularity, and the backend
choice that weighs a cached prefix against load.

A prompt is cut into full blocks of `BLOCK_CHARS` characters, and each block is named by a hash
chained over everything before it, as vLLM keys its prefix cache (`hash_block_tokens` and
`get_request_block_hasher` in `vllm/v1/core/kv_cache_utils.py`: a block's hash covers its parent
block's hash and its own tokens, only full blocks are hashed). So block i of two prompts has the
same hash only when their first i+1 blocks are equal, and "the longest cached prefix" is the run
of leading hashes a backend holds. The gateway hashes characters (it has no tokenizer of its
own): 64 characters are about vLLM's 16-token block. It keeps hashes, never prompt text.

The index is the gateway's routing history: a backend that was sent a prompt holds its blocks
until it evicts them. The index mimics that with an LRU per backend bounded by `block_budget`
(set it near the backend's cache size in blocks) and drops blocks unseen for `ttl` seconds.
Where a backend publishes its cache events, `scheduling.engine_cache` adds what it stored for
traffic the gateway never saw and removes what it evicted. Those prompts are keyed by token
blocks (`token_block_hashes`) rather than character blocks: the pool's prompts are tokenized.
"""

from __future__ import annotations

import hashlib
import math
from collections import OrderedDict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from scheduling.backend_state import BackendState

BLOCK_CHARS = 64
# Hashing stops here (about 32k tokens): admission cost stays bounded on huge prompts.
MAX_BLOCKS = 2048
_SEED = b"llmserver-prefix"


def block_hashes(text: str, block_chars: int = BLOCK_CHARS) -> tuple[int, ...]:
    """Chained hashes of the full `block_chars` blocks at the start of `text` (at most
    MAX_BLOCKS): hash i covers text[: (i + 1) * block_chars]."""
    out: list[int] = []
    parent = _SEED
    limit = min(len(text) // block_chars, MAX_BLOCKS)
    for i in range(limit):
        block = text[i * block_chars : (i + 1) * block_chars].encode("utf-8", "surrogatepass")
        parent = hashlib.blake2b(parent + block, digest_size=8).digest()
        out.append(int.from_bytes(parent, "big"))
    return tuple(out)


@dataclass(slots=True)
class PrefixIndex:
    """Per backend, the block hashes it was recently sent, least recently used first."""

    block_budget: int = 8192
    ttl: float = 600.0
    _seen: dict[str, OrderedDict[int, float]] = field(default_factory=dict)

    def matched(self, backend: str, blocks: Sequence[int], now: float) -> int:
        """How many leading blocks of `blocks` the backend holds (unexpired)."""
        seen = self._seen.get(backend)
        if not seen:
            return 0
        count = 0
        for h in blocks:
            at = seen.get(h)
            if at is None or now - at > self.ttl:
                break
            count += 1
        return count

    def record(self, backend: str, blocks: Sequence[int], now: float) -> None:
        """The backend was sent a prompt with `blocks`: they become its most recent, the first
        block most of all, so past the budget a chain loses its tail first and keeps its head
        (vLLM's `FreeKVCacheBlockQueue` evicts the tail of a chain first); blocks unseen for
        `ttl` go too."""
        if not blocks:
            return
        seen = self._seen.setdefault(backend, OrderedDict())
        for h in reversed(blocks):
            if seen.get(h) != math.inf:  # held by the backend's own word: no ageing
                seen[h] = now
            seen.move_to_end(h)
        while len(seen) > self.block_budget:
            seen.popitem(last=False)
        while seen and now - next(iter(seen.values())) > self.ttl:
            seen.popitem(last=False)

    def hold(self, backend: str, blocks: Sequence[int]) -> None:
        """The backend's own cache events say it holds these blocks: they do not age out (the
        events report their eviction), and ones new to the index come least recent of all, the
        tail first, so past the budget they go before what was routed, as the engine evicts a
        chain's tail first. A later dispatch of them makes them recent as `record` does."""
        if not blocks:
            return
        seen = self._seen.setdefault(backend, OrderedDict())
        for h in blocks:
            fresh = h not in seen
            seen[h] = math.inf
            if fresh:
                seen.move_to_end(h, last=False)
        while len(seen) > self.block_budget:
            seen.popitem(last=False)

    def remove(self, backend: str, blocks: Iterable[int]) -> None:
        """The backend evicted these blocks (its own cache events say so)."""
        seen = self._seen.get(backend)
        if seen:
            for h in blocks:
                seen.pop(h, None)

    def clear(self, backend: str) -> None:
        self._seen.pop(backend, None)

    def forget(self, keep: set[str]) -> None:
        """Drop backends no longer configured."""
        for name in set(self._seen) - keep:
            del self._seen[name]

    def size(self, backend: str) -> int:
        return len(self._seen.get(backend, ()))


def load(state: BackendState, held: Mapping[str, int]) -> float:
    """A backend's load in slots: every sequence at it (ours in flight, others' as scraped),
    those beyond its capacity counted twice (they wait as well as occupy), and those the gateway
    holds back for it. Not `estimated_waiting()` without a capacity: that counts each dispatch
    since the last scrape as waiting, which our in-flight count already holds, so the same
    backend's load would swing by the number of dispatches between two scrapes."""
    at_backend = state.in_flight + state.external_load()
    if state.capacity is not None:
        at_backend += max(0.0, at_backend - state.capacity)
    return at_backend + held.get(state.name, 0)


def choose_backend(
    index: PrefixIndex,
    blocks: Sequence[int],
    open_backends: Sequence[BackendState],
    full: Sequence[BackendState],
    now: float,
    prefix_weight: float,
    held: Mapping[str, int],
) -> BackendState:
    """The backend with the best `prefix_weight * cached fraction - load`, among the open
    backends and the full ones that hold part of the prompt: a fully cached prompt is worth
    `prefix_weight` slots of load. A full backend chosen means "wait for it" (the caller holds
    the job and counts it in `held`, so only as many wait as the prefix is worth); once its load
    exceeds the prefix's worth, the prefix spills to an open backend. Ties: the longer cached
    prefix, then the lighter load, then the name. Without blocks this is least load."""
    hits = {
        s.name: index.matched(s.name, blocks, now) / len(blocks) if blocks else 0.0
        for s in [*open_backends, *full]
    }
    homes = [s for s in full if hits[s.name] > 0]

    def rank(state: BackendState) -> tuple[float, float, float, str]:
        busy = load(state, held)
        return (-(prefix_weight * hits[state.name] - busy), -hits[state.name], busy, state.name)

    return min([*open_backends, *homes], key=rank)
