"""The prefix index: chained block hashes, the longest cached prefix, bounded memory, ageing, and
the backend choice that weighs a cached prefix against load (a hot prefix spills when full)."""

from __future__ import annotations

from sched_helpers import BOB, fresh, job, metered, plain, scheduler

from scheduling import Job, Principal, Scheduler
from scheduling.lanes import EntryState
from scheduling.prefix_index import BLOCK_CHARS, MAX_BLOCKS, PrefixIndex, block_hashes

SYSTEM = "You are a careful assistant for the billing team. " * 40  # about 2,000 characters


def test_prompts_sharing_a_start_share_exactly_the_blocks_of_that_start() -> None:
    a = block_hashes(SYSTEM + "How do I pay an invoice?")
    b = block_hashes(SYSTEM + "Where is my refund?")
    shared = len(SYSTEM) // BLOCK_CHARS
    assert a[:shared] == b[:shared]
    assert block_hashes("x" + SYSTEM)[0] != a[0]


def test_a_block_hash_covers_everything_before_it() -> None:
    first = "a" * BLOCK_CHARS + "b" * BLOCK_CHARS
    second = "c" * BLOCK_CHARS + "b" * BLOCK_CHARS
    assert block_hashes(first)[1] != block_hashes(second)[1]


def test_only_full_blocks_are_hashed_and_huge_prompts_are_capped() -> None:
    assert block_hashes("y" * (BLOCK_CHARS - 1)) == ()
    assert len(block_hashes("y" * (BLOCK_CHARS * 3 + 5))) == 3
    assert len(block_hashes("z" * BLOCK_CHARS * (MAX_BLOCKS + 10))) == MAX_BLOCKS


def test_the_index_finds_the_longest_cached_prefix() -> None:
    index = PrefixIndex()
    short = block_hashes(SYSTEM[:640])  # 10 blocks
    full = block_hashes(SYSTEM + "question one " * 20)
    index.record("b1", short, 0.0)
    index.record("b2", full, 0.0)
    asked = block_hashes(SYSTEM + "question two " * 20)
    assert index.matched("b1", asked, 1.0) == 10
    assert index.matched("b2", asked, 1.0) == len(SYSTEM) // BLOCK_CHARS
    assert index.matched("b3", asked, 1.0) == 0


def test_its_memory_stays_within_the_block_budget_per_backend() -> None:
    index = PrefixIndex(block_budget=100)
    for i in range(50):
        index.record("b1", block_hashes(f"tenant {i} " + SYSTEM), float(i))
    assert index.size("b1") == 100


def test_past_the_budget_the_least_recent_prefix_loses_its_tail_first() -> None:
    index = PrefixIndex(block_budget=40)
    old, new = block_hashes("old " + SYSTEM), block_hashes("new " + SYSTEM)
    index.record("b1", old, 0.0)
    index.record("b1", new, 1.0)
    assert index.matched("b1", new, 2.0) == len(new)
    assert index.matched("b1", old, 2.0) == 40 - len(new)


def test_prefixes_unseen_for_the_ttl_age_out() -> None:
    index = PrefixIndex(ttl=60.0)
    blocks = block_hashes(SYSTEM)
    index.record("b1", blocks, 0.0)
    assert index.matched("b1", blocks, 59.0) == len(blocks)
    assert index.matched("b1", blocks, 61.0) == 0
    index.record("b1", block_hashes("other " + SYSTEM), 61.0)
    assert index.size("b1") == len(blocks)  # the aged blocks are gone, not just ignored


def test_a_job_goes_where_its_prefix_is_cached() -> None:
    s = scheduler(plain("b1"), plain("b2"), plain("b3"))
    blocks = block_hashes(SYSTEM + "first question")
    s.submit(job(prefix_blocks=blocks), 0.0)
    home = s.select(0.0)[0].backend
    s.submit(job(BOB, prefix_blocks=block_hashes(SYSTEM + "second question")), 0.0)
    assert s.select(0.0)[0].backend == home


def test_a_longer_cached_prefix_wins_over_a_shorter_one() -> None:
    s = scheduler(plain("b1"), plain("b2"), affinity_slack=4)
    s.prefixes.record("b1", block_hashes(SYSTEM[:640]), 0.0)
    s.prefixes.record("b2", block_hashes(SYSTEM), 0.0)
    s.submit(job(prefix_blocks=block_hashes(SYSTEM + "a question")), 0.0)
    assert s.select(0.0)[0].backend == "b2"


def hot_prefix_on_a_full_backend() -> tuple[Scheduler, list[Job], list[str]]:
    """Four users send the same long prefix to two backends of two slots, a prefix worth two
    slots: two go to b1 and fill it, the third waits for b1, the fourth spills to b2."""
    s = scheduler(plain("b1", max_in_flight=2), plain("b2", max_in_flight=2), affinity_slack=2)
    jobs = [job(Principal("t", u), prefix_blocks=block_hashes(SYSTEM + u)) for u in "abcd"]
    for j in jobs:
        s.submit(j, 0.0)
    return s, jobs, [d.backend for d in s.select(0.0)]


def test_a_hot_prefix_spills_when_its_full_backend_has_as_many_waiting_as_it_is_worth() -> None:
    s, jobs, backends = hot_prefix_on_a_full_backend()
    assert backends == ["b1", "b1", "b2"]
    assert s.entries[jobs[2].id].state is EntryState.QUEUED


def test_a_job_waiting_for_the_backend_holding_its_prefix_goes_there_when_a_slot_frees() -> None:
    s, jobs, _ = hot_prefix_on_a_full_backend()
    s.complete(jobs[0].id)
    (d,) = s.select(1.0)
    assert (d.job.id, d.backend) == (jobs[2].id, "b1")


def test_a_full_backend_without_the_prefix_is_never_waited_for() -> None:
    s = scheduler(plain("b1", max_in_flight=1), plain("b2", max_in_flight=4), affinity_slack=4)
    s.backends["b1"].in_flight = 1
    s.backends["b2"].in_flight = 3
    s.submit(job(prefix_blocks=block_hashes(SYSTEM)), 0.0)
    assert [d.backend for d in s.select(0.0)] == ["b2"]


def test_a_hot_prefix_spills_when_its_backend_carries_more_than_the_prefix_is_worth() -> None:
    s = scheduler(plain("b1"), plain("b2"), affinity_slack=2)
    blocks = block_hashes(SYSTEM)
    s.prefixes.record("b1", blocks, 0.0)
    s.backends["b1"].in_flight = 3  # worth 2 slots: 2 - 3 < 0 - 0
    s.submit(job(prefix_blocks=blocks), 0.0)
    assert s.select(0.0)[0].backend == "b2"


def test_a_job_without_blocks_goes_to_the_least_loaded_backend() -> None:
    s = scheduler(plain("b1"), plain("b2"))
    s.prefixes.record("b1", block_hashes(SYSTEM), 0.0)
    s.backends["b1"].in_flight = 1
    s.submit(job(), 0.0)
    assert s.select(0.0)[0].backend == "b2"


def test_dispatches_since_the_last_scrape_do_not_count_twice_against_the_prefix() -> None:
    """The turns of a conversation: its backend finished the first turn and runs one other
    request. Its load is that one request, however many dispatches the next scrape will show."""
    s = scheduler(metered("b1", max_in_flight=4), metered("b2", max_in_flight=4), affinity_slack=2)
    for name in ("b1", "b2"):
        s.update_metrics(name, fresh())
    first = job(prefix_blocks=block_hashes(SYSTEM[:640]))
    s.submit(first, 0.0)
    assert s.select(0.0)[0].backend == "b1"
    s.complete(first.id)
    s.submit(job(BOB), 0.0)
    assert s.select(0.0)[0].backend == "b1"  # an idle pool's tie goes by name
    s.submit(job(prefix_blocks=block_hashes(SYSTEM[:768])), 0.0)  # 10 of its 12 blocks cached
    assert s.select(0.0)[0].backend == "b1"
