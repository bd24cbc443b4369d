"""Shortest-estimated-first estimates an answer from `max_tokens` and the principal's recent
answers on the model, whichever is smaller."""

from __future__ import annotations

from scheduling import OutputLengths, Principal

ALICE = Principal("acme", "alice")
BOB = Principal("acme", "bob")


def test_without_history_the_estimate_is_max_tokens():
    assert OutputLengths().estimate(ALICE, "m", 512) == 512


def test_a_principal_with_short_answers_is_estimated_short_despite_a_large_max_tokens():
    lengths = OutputLengths()
    for _ in range(5):
        lengths.observe(ALICE, "m", 20)
    assert lengths.estimate(ALICE, "m", 4096) == 20


def test_max_tokens_caps_the_estimate():
    lengths = OutputLengths()
    lengths.observe(ALICE, "m", 900)
    assert lengths.estimate(ALICE, "m", 100) == 100


def test_recent_answers_weigh_more_than_old_ones():
    lengths = OutputLengths()
    lengths.observe(ALICE, "m", 1000)
    for _ in range(30):
        lengths.observe(ALICE, "m", 10)
    assert lengths.estimate(ALICE, "m", 4096) < 20


def test_history_is_per_principal_and_model():
    lengths = OutputLengths()
    lengths.observe(ALICE, "m", 10)
    assert lengths.estimate(BOB, "m", 300) == 300
    assert lengths.estimate(ALICE, "other", 300) == 300


def test_memory_is_bounded_forgetting_the_least_recently_seen():
    lengths = OutputLengths(capacity=2)
    lengths.observe(ALICE, "m", 10)
    lengths.observe(BOB, "m", 10)
    lengths.observe(ALICE, "m", 10)
    lengths.observe(ALICE, "other", 10)
    assert len(lengths) == 2
    assert lengths.estimate(BOB, "m", 300) == 300
    assert lengths.estimate(ALICE, "m", 300) == 10
