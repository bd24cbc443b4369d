"""The simulated engine: vLLM-style continuous batching over a FIFO or priority waiting queue.

One engine step first admits waiting sequences while fewer than `max_num_seqs` run and their
prompts fit in the KV cache, then emits one token to every running sequence. A step takes
`base_step_ms + per_seq_ms * running` plus, where it computes any prompt, `prefill_step_ms` and
`prefill_ms_per_token` for each uncached prompt token of the sequences admitted in it (so a
sequence's first token arrives at the end of its prefill step, as in vLLM). The fixed part is
what a step that computes a prompt costs vLLM beyond its tokens (its CPU build: about 70 ms,
`bench/vllm_calibrate.py`; a prompt's tokens are counted in the simulator's own tokenizer, which
renders no system preamble where a real chat template adds one); 0 by default. When decoding would overflow the KV cache, the latest-admitted sequence is
preempted back to the waiting queue and recomputed later. An abort (a client that went away)
takes effect at the start of the next step, as in vLLM, where the API server's abort travels to
the engine core's input queue and is handled between two steps (`EngineCoreProc.run_busy_loop`,
`_process_input_queue` then `_process_engine_step`, in `vllm/v1/engine/core.py`): until then the
sequence still holds its slot and shows in `num_requests_running`. `speed` divides every duration.
A request that ends (not one aborted by its client, whose state the API server drops first:
`OutputProcessor.abort_requests` in `vllm/v1/engine/output_processor.py`) is observed in the
per-request histograms, its prefill time from first scheduled to first token and its prompt
tokens computed (less what the prefix cache held), as `update_from_finished_request` in
`vllm/v1/metrics/stats.py` and `record_finished_request` in `vllm/v1/metrics/loggers.py` do.

A sequence ends at `max_tokens` (finish reason "length") or, given a `stop_at`, at that many
tokens with finish reason "stop": the model's end-of-sequence token, which vLLM's scheduler
checks before the length cap (`check_stop` in `vllm/v1/core/sched/utils.py`). A pooling
sequence (an embedding) takes its batch slot for its prefill step only and ends there with
"stop" and no generated token, as vLLM's scheduler stops a pooling request as soon as the pooler
has output (`update_from_output` in `vllm/v1/core/sched/scheduler.py`). A request with `n > 1`
is n sequences, as vLLM's `AsyncLLM.add_request` fans a parent out into n child requests
(`vllm/v1/engine/parallel_sampling.py`): each takes a slot and counts in the metrics.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from simulator.prefix_cache import CacheEvent, PrefixCache
from simulator.queue import POLICIES, RequestQueue, create_request_queue
from simulator.stats import EngineStats

_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class EngineConfig:
    max_num_seqs: int = 16
    base_step_ms: float = 15.0
    per_seq_ms: float = 0.6
    prefill_ms_per_token: float = 0.05
    prefill_step_ms: float = 0.0
    kv_capacity_tokens: int = 131_072
    prefix_cache_blocks: int = 4096
    block_tokens: int = 16
    scheduling_policy: str = "fcfs"
    speed: float = 1.0
    # The context length (vLLM's `--max-model-len`): prompt plus output. None: the KV capacity.
    max_model_len: int | None = None

    def __post_init__(self) -> None:
        if self.scheduling_policy not in POLICIES:
            raise ValueError(f"scheduling_policy must be one of {POLICIES}")
        if self.max_num_seqs < 1 or self.speed <= 0 or self.kv_capacity_tokens < 1:
            raise ValueError("max_num_seqs and kv_capacity_tokens must be >= 1, speed > 0")
        if self.max_model_len is not None and self.max_model_len < 1:
            raise ValueError("max_model_len must be >= 1")

    @property
    def model_len(self) -> int:
        """The context length requests are held to (`/v1/models` reports it)."""
        return self.max_model_len if self.max_model_len is not None else self.kv_capacity_tokens


@dataclass(eq=False, slots=True)
class Sequence:
    """One request inside the engine. `events` gets the running token count, then None."""

    prompt_tokens: list[str]
    max_tokens: int
    priority: int = 0
    request_id: int = field(default_factory=lambda: next(_ids))
    arrived: float = 0.0
    removed: bool = True
    events: asyncio.Queue[int | None] = field(default_factory=asyncio.Queue)
    generated: int = 0
    cached_tokens: int = 0
    prefill_pending: int = 0
    first_scheduled: float | None = None
    first_token_at: float | None = None
    last_token_at: float | None = None
    finish_reason: str | None = None
    stop_at: int | None = None
    pooling: bool = False

    @property
    def num_prompt_tokens(self) -> int:
        return len(self.prompt_tokens)

    @property
    def held_tokens(self) -> int:
        return self.num_prompt_tokens + self.generated

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None


class Engine:
    def __init__(
        self,
        config: EngineConfig,
        clock: Callable[[], float] = time.monotonic,
        on_cache_events: Callable[[list[CacheEvent]], None] | None = None,
        token_id: Callable[[str], int] | None = None,
    ) -> None:
        """`on_cache_events`: given, after each step, what the prefix cache stored and evicted
        in it (ids from `token_id`), as vLLM's engine hands its KV events to the publisher."""
        self.config = config
        self.clock = clock
        self.waiting: RequestQueue[Sequence] = create_request_queue(config.scheduling_policy)
        self.running: list[Sequence] = []
        self._on_cache_events = on_cache_events
        self.prefix_cache = PrefixCache(
            config.prefix_cache_blocks,
            config.block_tokens,
            token_id if on_cache_events is not None else None,
        )
        self.stats = EngineStats()
        self._aborts: list[Sequence] = []
        self._work = asyncio.Event()
        self._step_end: float | None = None  # when the last step was due to end

    @property
    def num_waiting(self) -> int:
        return len(self.waiting)

    @property
    def num_running(self) -> int:
        return len(self.running)

    @property
    def held_tokens(self) -> int:
        return sum(s.held_tokens for s in self.running)

    @property
    def kv_cache_usage(self) -> float:
        return min(1.0, self.held_tokens / self.config.kv_capacity_tokens)

    def add(self, seq: Sequence) -> Sequence:
        seq.arrived = self.clock()
        self.stats.received += 1
        self.waiting.add(seq)
        self._work.set()
        return seq

    def abort(self, seq: Sequence) -> None:
        """A client went away: the sequence is dropped, and its slot freed, at the next step."""
        if not seq.finished and seq not in self._aborts:
            self._aborts.append(seq)
            self._work.set()

    def _apply_aborts(self) -> None:
        aborts, self._aborts = self._aborts, []
        for seq in aborts:
            if seq.finished:
                continue
            if seq in self.running:
                self.running.remove(seq)
            else:
                self.waiting.remove(seq)
            self._finish(seq, "abort")

    def _finish(self, seq: Sequence, reason: str) -> None:
        seq.finish_reason = reason
        self.stats.finished[reason] += 1
        now = self.clock()
        if reason != "abort":
            self.stats.e2e.observe(now - seq.arrived)
            if seq.first_scheduled is not None and seq.first_token_at is not None:
                self.stats.prefill_time.observe(seq.first_token_at - seq.first_scheduled)
                self.stats.prefill_computed.observe(seq.num_prompt_tokens - seq.cached_tokens)
            if seq.generated > 1 and seq.first_token_at is not None:
                self.stats.request_tpot.observe((now - seq.first_token_at) / (seq.generated - 1))
        seq.events.put_nowait(None)

    def _admit(self) -> int:
        """vLLM's schedule(): move waiting sequences into the batch; returns tokens to prefill."""
        prefill, held = 0, self.held_tokens
        while len(self.running) < self.config.max_num_seqs:
            seq = self.waiting.peek()
            if seq is None:
                break
            if self.running and held + seq.held_tokens > self.config.kv_capacity_tokens:
                break
            self.waiting.pop()
            now = self.clock()
            if seq.first_scheduled is None:
                seq.first_scheduled = now
                self.stats.queue_time.observe(now - seq.arrived)
                seq.cached_tokens = self.prefix_cache.lookup_and_insert(seq.prompt_tokens)
                self.stats.prefix_queries += seq.num_prompt_tokens
                self.stats.prefix_hits += seq.cached_tokens
                seq.prefill_pending = seq.num_prompt_tokens - seq.cached_tokens
                self.stats.prompt_tokens += seq.num_prompt_tokens
            prefill += seq.prefill_pending
            seq.prefill_pending = 0
            held += seq.held_tokens
            self.running.append(seq)
        return prefill

    def _preempt_for_decode(self) -> None:
        """One more token each must fit; otherwise recompute the newest sequence later."""
        while (
            len(self.running) > 1
            and self.held_tokens + len(self.running) > self.config.kv_capacity_tokens
        ):
            victim = self.running.pop()
            victim.prefill_pending = victim.held_tokens
            self.stats.preemptions += 1
            self.waiting.push_front(victim)

    def step_seconds(self, prefill_tokens: int) -> float:
        c = self.config
        ms = c.base_step_ms + c.per_seq_ms * len(self.running)
        if prefill_tokens:
            ms += c.prefill_step_ms + c.prefill_ms_per_token * prefill_tokens
        return ms / 1000.0 / c.speed

    async def step_once(self) -> bool:
        """One engine step; False when there was nothing to run."""
        self._apply_aborts()
        prefill = self._admit()
        self._preempt_for_decode()
        if not self.running:
            return False
        duration = self.step_seconds(prefill)
        started = self.clock()
        # Steps run back to back on a schedule: a wake-up the event loop made late shortens the
        # next step by as much (up to a whole step), so the engine keeps its cost model's pace
        # at any speed, rather than that pace plus the loop's delays at every step.
        base = started
        if self._step_end is not None and started - self._step_end < duration:
            base = self._step_end
        self._step_end = base + duration
        await asyncio.sleep(max(0.0, self._step_end - started))
        if self._on_cache_events is not None:
            self._on_cache_events(self.prefix_cache.take_events())
        self.stats.busy_seconds += self.clock() - started
        if prefill:
            self.stats.prefill_steps += 1
        self.stats.decode_steps += 1
        now = self.clock()
        for seq in list(self.running):
            if seq.finished or seq in self._aborts:
                continue
            if seq.pooling:
                self._pool(seq, now)
            else:
                self._emit(seq, now)
        return True

    def _pool(self, seq: Sequence, now: float) -> None:
        """The pooler's output at the end of the prefill step: the request is done."""
        seq.first_token_at = seq.last_token_at = now
        self.stats.ttft.observe(now - seq.arrived)
        self.running.remove(seq)
        self._finish(seq, "stop")

    def _emit(self, seq: Sequence, now: float) -> None:
        seq.generated += 1
        self.stats.generation_tokens += 1
        if seq.first_token_at is None:
            seq.first_token_at = now
            self.stats.ttft.observe(now - seq.arrived)
        else:
            self.stats.itl.observe(now - (seq.last_token_at or now))
        seq.last_token_at = now
        seq.events.put_nowait(seq.generated)
        if seq.stop_at is not None and seq.generated >= seq.stop_at:
            self.running.remove(seq)
            self._finish(seq, "stop")
        elif seq.generated >= seq.max_tokens:
            self.running.remove(seq)
            self._finish(seq, "length")

    async def run(self) -> None:
        """Step while there is work; sleep on an event (no polling) when idle."""
        while True:
            if not await self.step_once():
                self._work.clear()
                if not self.running and self.waiting.peek() is None:
                    await self._work.wait()
