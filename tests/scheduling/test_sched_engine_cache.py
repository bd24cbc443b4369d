"""A backend's own cache events in the prefix index: what it stored is found, whatever its block
size; what it evicted or cleared is gone; blocks it cannot place in the chain are skipped; the
mirror's memory is bounded; and a job follows a prefix cached by traffic the gateway never saw."""

from __future__ import annotations

from sched_helpers import job, plain, scheduler

from scheduling import (
    AllBlocksCleared,
    BlocksRemoved,
    BlocksStored,
    CacheEvent,
    token_block_hashes,
)
from scheduling.engine_cache import TOKEN_BLOCK, EngineCacheMirror
from scheduling.prefix_index import PrefixIndex

PROMPT = tuple(range(1000, 1000 + 10 * TOKEN_BLOCK + 5))  # ten full gateway blocks and a bit


def stored(tokens: tuple[int, ...], block_size: int, first: int = 0) -> list[CacheEvent]:
    """The engine's events for caching `tokens` in blocks of `block_size` (its full ones), one
    event per block, each naming its parent, engine hashes numbered from `first`."""
    events: list[CacheEvent] = []
    for i in range(len(tokens) // block_size):
        parent = first + i - 1 if i else None
        chunk = tokens[i * block_size : (i + 1) * block_size]
        events.append(BlocksStored((first + i,), parent, chunk, block_size))
    return events


def mirrored(events: list[CacheEvent]) -> tuple[EngineCacheMirror, PrefixIndex]:
    mirror, index = EngineCacheMirror(), PrefixIndex()
    mirror.apply("b1", events, index)
    return mirror, index


def test_token_blocks_are_chained_and_only_full_blocks_count() -> None:
    hashes = token_block_hashes(PROMPT)
    assert len(hashes) == 10
    assert token_block_hashes(PROMPT[:TOKEN_BLOCK])[0] == hashes[0]
    assert token_block_hashes((7, *PROMPT[1:]))[1] != hashes[1]


def test_what_the_engine_stored_is_found_as_the_prompts_token_blocks() -> None:
    _, index = mirrored(stored(PROMPT, 16))
    assert index.matched("b1", token_block_hashes(PROMPT), 1.0) == 10


def test_one_stored_event_may_carry_many_blocks() -> None:
    blocks = len(PROMPT) // 16
    one = BlocksStored(tuple(range(blocks)), None, PROMPT[: blocks * 16], 16)
    _, index = mirrored([one])
    assert index.matched("b1", token_block_hashes(PROMPT), 1.0) == 10


def test_an_engine_block_size_other_than_the_gateways_gives_the_same_blocks() -> None:
    for block_size in (1, 8, 32, 48):
        _, index = mirrored(stored(PROMPT, block_size))
        full = len(PROMPT) // block_size * block_size // TOKEN_BLOCK
        assert index.matched("b1", token_block_hashes(PROMPT), 1.0) == full, block_size


def test_an_evicted_block_takes_the_gateway_blocks_it_completed() -> None:
    mirror, index = mirrored(stored(PROMPT, 32))  # engine block 3 completed gateway blocks 6, 7
    mirror.apply("b1", [BlocksRemoved((3,))], index)
    assert index.matched("b1", token_block_hashes(PROMPT), 1.0) == 6


def test_a_cleared_cache_clears_the_backend() -> None:
    mirror, index = mirrored(stored(PROMPT, 16))
    mirror.apply("b1", [AllBlocksCleared()], index)
    assert index.size("b1") == 0
    assert mirror.size("b1") == 0


def test_a_block_whose_parent_was_never_seen_is_skipped() -> None:
    events = stored(PROMPT, 16)
    mirror, index = mirrored(events[3:])  # the first three were stored before we listened
    assert index.size("b1") == 0
    assert mirror.skipped == 7


def test_the_mirrors_memory_stays_within_its_limit() -> None:
    mirror, index = EngineCacheMirror(limit=50), PrefixIndex()
    for n in range(20):
        tokens = tuple(range(n * 10_000, n * 10_000 + 64))
        mirror.apply("b1", stored(tokens, 16, first=n * 100), index)
    assert mirror.size("b1") == 50


def test_a_job_follows_a_prefix_the_backend_cached_for_traffic_the_gateway_never_saw() -> None:
    s = scheduler(plain("b1"), plain("b2"))
    s.apply_cache_events("b2", stored(PROMPT, 16))
    s.submit(job(prefix_blocks=token_block_hashes(PROMPT)), 0.0)
    assert s.select(0.0)[0].backend == "b2"  # an idle pool's tie would have gone to b1


def test_a_job_leaves_a_backend_whose_events_say_its_prefix_was_evicted() -> None:
    s = scheduler(plain("b1"), plain("b2"))
    blocks = token_block_hashes(PROMPT)
    s.prefixes.record("b2", blocks, 0.0)  # the gateway sent it there earlier
    s.apply_cache_events("b2", stored(PROMPT, 16))
    s.apply_cache_events("b2", [BlocksRemoved(tuple(range(10)))])
    s.submit(job(prefix_blocks=blocks), 1.0)
    assert s.select(1.0)[0].backend == "b1"


def test_a_block_the_engine_holds_twice_stays_until_its_last_copy_is_evicted() -> None:
    mirror, index = mirrored(stored(PROMPT, 16))
    mirror.apply("b1", [BlocksStored((9,), 8, PROMPT[144:160], 16)], index)  # a 2nd copy
    mirror.apply("b1", [BlocksRemoved((9,))], index)
    assert index.matched("b1", token_block_hashes(PROMPT), 0.0) == 10
    mirror.apply("b1", [BlocksRemoved((9,))], index)
    assert index.matched("b1", token_block_hashes(PROMPT), 0.0) == 9


def test_a_stored_event_whose_tokens_do_not_fill_its_blocks_is_skipped() -> None:
    mirror, index = mirrored([BlocksStored((1, 2), None, PROMPT[:20], 16)])
    assert (index.size("b1"), mirror.skipped) == (0, 2)


def test_what_the_engine_says_it_holds_does_not_age_out() -> None:
    _, index = mirrored(stored(PROMPT, 16))
    assert index.matched("b1", token_block_hashes(PROMPT), 10 * index.ttl) == 10


def test_past_its_limit_the_mirror_keeps_the_root_that_is_built_upon() -> None:
    mirror, index = EngineCacheMirror(limit=4), PrefixIndex()
    root = tuple(range(16))
    mirror.apply("b1", [BlocksStored((100,), None, root, 16)], index)
    for n in range(6):  # six branches on the same root
        branch = BlocksStored((200 + n,), 100, tuple(range(1000 * n, 1000 * n + 16)), 16)
        mirror.apply("b1", [branch], index)
    late = BlocksStored((300,), 100, tuple(range(9000, 9016)), 16)
    mirror.apply("b1", [late], index)
    assert mirror.skipped == 0
    assert index.matched("b1", token_block_hashes((*root, *range(9000, 9016))), 0.0) == 2
