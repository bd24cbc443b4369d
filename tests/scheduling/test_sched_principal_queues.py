"""The contract every within-principal policy keeps, checked for each through the factory."""

from __future__ import annotations

import pytest
from sched_helpers import job

from scheduling import create_principal_queue
from scheduling.lanes import POLICIES, Entry


def entries(n: int) -> list[Entry]:
    return [Entry(job=job(estimated_output_tokens=5), seq=i) for i in range(n)]


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_it_pops_every_pushed_entry_once(policy: str) -> None:
    q = create_principal_queue(policy)
    es = entries(4)
    for e in es:
        q.push(e)
    popped = [q.pop() for _ in es]
    assert sorted(e.seq for e in popped) == [0, 1, 2, 3]
    assert q.peek() is None


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_it_skips_an_entry_removed_elsewhere(policy: str) -> None:
    q = create_principal_queue(policy)
    a, b = entries(2)
    q.push(a)
    q.push(b)
    a.where = None
    assert q.pop() is b


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_it_puts_push_front_first(policy: str) -> None:
    q = create_principal_queue(policy)
    a, b = entries(2)
    q.push(a)
    q.push_front(b)
    assert q.pop() is b


@pytest.mark.parametrize("policy", sorted(POLICIES))
def test_it_keeps_equal_estimates_in_arrival_order(policy: str) -> None:
    q = create_principal_queue(policy)
    es = entries(3)
    for e in es:
        q.push(e)
    assert [q.pop().seq for _ in es] == [0, 1, 2]


def test_it_rejects_an_unknown_policy() -> None:
    with pytest.raises(ValueError, match="unknown"):
        create_principal_queue("lifo")
