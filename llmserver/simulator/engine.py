"""The simulated engine: continuous batching over a FIFO (or priority) waiting queue.

Like vLLM's scheduler, each engine step admits waiting sequences while fewer than
`max_num_seqs` run and their KV blocks fit, then emits one token to every running sequence. A step
takes `base_step_ms + per_seq_ms * running`, plus a prefill time for the uncached prompt tokens of
sequences admitted in that step. An LRU prefix cache of prompt blocks makes repeated prefixes
cheaper. Aborting a sequence frees its slot at once. `speed` divides every duration.
"""

from __future__ import annotations

import asyncio
import hashlib
import heapq
import itertools
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass, field

BLOCK_TOKENS = 16


@dataclass(frozen=True, slots=True)
class EngineConfig:
    max_num_seqs: int = 16
    base_step_ms: float = 15.0
    per_seq_ms: float = 0.6
    prefill_ms_per_token: float = 0.02
    kv_capacity_tokens: int = 262_144
    prefix_cache_blocks: int = 4096
    scheduling_policy: str = "fcfs"  # or "priority": lower value first, as vLLM
    speed: float = 1.0


@dataclass(eq=False)
class Sequence:
    prompt: str
    prompt_tokens: int
    max_tokens: int
    priority: int = 0
    arrived: float = 0.0
    tokens: asyncio.Queue[int | None] = field(default_factory=asyncio.Queue)
    generated: int = 0
    admitted: float | None = None
    first_token: float | None = None
    last_token: float | None = None
    cached_tokens: int = 0
    finished: bool = False
    aborted: bool = False

    @property
    def held_tokens(self) -> int:
        return self.prompt_tokens + self.generated


def prompt_blocks(prompt: str, prompt_tokens: int) -> list[str]:
    """Chained hashes of full prompt blocks, so a block matches only after the same prefix."""
    chars_per_block = max(1, len(prompt) * BLOCK_TOKENS // max(prompt_tokens, 1))
    digest = hashlib.blake2b(digest_size=8)
    blocks = []
    for i in range(prompt_tokens // BLOCK_TOKENS):
        digest.update(prompt[i * chars_per_block : (i + 1) * chars_per_block].encode())
        blocks.append(digest.copy().hexdigest())
    return blocks


class Engine:
    def __init__(
        self,
        config: EngineConfig,
        on_token: Callable[[Sequence, float], None] | None = None,
        on_finish: Callable[[Sequence, str], None] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.config = config
        self.clock = clock
        self.on_token = on_token or (lambda seq, now: None)
        self.on_finish = on_finish or (lambda seq, reason: None)
        self._fifo: deque[Sequence] = deque()
        self._heap: list[tuple[int, float, int, Sequence]] = []
        self._order = itertools.count()
        self.running: list[Sequence] = []
        self._cache: OrderedDict[str, None] = OrderedDict()
        self._work = asyncio.Event()
        self.busy_seconds = 0.0
        self.received = 0
        self.generated_tokens = 0
        self.prefix_queries = 0
        self.prefix_hits = 0

    # queue ---------------------------------------------------------------------------------

    @property
    def waiting(self) -> int:
        if self.config.scheduling_policy == "priority":
            return sum(1 for *_, s in self._heap if not s.aborted)
        return len(self._fifo)

    def add(self, seq: Sequence) -> None:
        seq.arrived = self.clock()
        self.received += 1
        if self.config.scheduling_policy == "priority":
            heapq.heappush(self._heap, (seq.priority, seq.arrived, next(self._order), seq))
        else:
            self._fifo.append(seq)
        self._work.set()

    def abort(self, seq: Sequence) -> None:
        if seq.finished:
            return
        seq.aborted = seq.finished = True
        if seq in self.running:
            self.running.remove(seq)
        elif self.config.scheduling_policy != "priority" and seq in self._fifo:
            self._fifo.remove(seq)
        self.on_finish(seq, "abort")

    def _peek(self) -> Sequence | None:
        if self.config.scheduling_policy == "priority":
            while self._heap and self._heap[0][3].aborted:
                heapq.heappop(self._heap)
            return self._heap[0][3] if self._heap else None
        return self._fifo[0] if self._fifo else None

    def _pop(self) -> None:
        if self.config.scheduling_policy == "priority":
            heapq.heappop(self._heap)
        else:
            self._fifo.popleft()

    @property
    def kv_usage(self) -> float:
        return min(1.0, sum(s.held_tokens for s in self.running) / self.config.kv_capacity_tokens)

    # the engine loop ----------------------------------------------------------------------

    def _admit(self) -> int:
        """Move waiting sequences into the batch; returns the prompt tokens to prefill."""
        prefill = 0
        held = sum(s.held_tokens for s in self.running)
        while len(self.running) < self.config.max_num_seqs:
            seq = self._peek()
            if seq is None:
                break
            # A sequence that does not fit waits for blocks to free up (one alone always runs).
            fits = held + seq.prompt_tokens + seq.max_tokens <= self.config.kv_capacity_tokens
            if not fits and self.running:
                break
            self._pop()
            seq.admitted = self.clock()
            blocks = prompt_blocks(seq.prompt, seq.prompt_tokens)
            hits = 0
            for block in blocks:
                if block not in self._cache:
                    break
                hits += 1
            self.prefix_queries += seq.prompt_tokens
            self.prefix_hits += hits * BLOCK_TOKENS
            seq.cached_tokens = hits * BLOCK_TOKENS
            for block in blocks:
                self._cache[block] = None
                self._cache.move_to_end(block)
            while len(self._cache) > self.config.prefix_cache_blocks:
                self._cache.popitem(last=False)
            prefill += seq.prompt_tokens - seq.cached_tokens
            held += seq.prompt_tokens + seq.max_tokens
            self.running.append(seq)
        return prefill

    def step_seconds(self, prefill_tokens: int) -> float:
        c = self.config
        ms = (
            c.base_step_ms
            + c.per_seq_ms * len(self.running)
            + c.prefill_ms_per_token * prefill_tokens
        )
        return ms / 1000.0 / c.speed

    async def step_once(self) -> None:
        prefill = self._admit()
        if not self.running:
            return
        duration = self.step_seconds(prefill)
        await asyncio.sleep(duration)
        self.busy_seconds += duration
        now = self.clock()
        for seq in list(self.running):
            if seq.aborted:
                continue
            seq.generated += 1
            self.generated_tokens += 1
            self.on_token(seq, now)
            if seq.first_token is None:
                seq.first_token = now
            seq.last_token = now
            seq.tokens.put_nowait(seq.generated)
            if seq.generated >= seq.max_tokens:
                seq.finished = True
                self.running.remove(seq)
                seq.tokens.put_nowait(None)
                self.on_finish(seq, "length")

    async def run(self) -> None:
        while True:
            if not self.running and self._peek() is None:
                self._work.clear()
                await self._work.wait()
            await self.step_once()
