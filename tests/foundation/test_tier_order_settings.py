"""A tier's order and aging, chosen in the admin, reach the request path's key info."""

from __future__ import annotations

from llmserver.runtime.keys import load_key
from tenants.models import Tier


def test_a_tiers_order_and_aging_reach_its_keys(cast) -> None:
    Tier.objects.filter(pk=cast.interactive.pk).update(within_principal="sjf", aging_seconds=0)
    info = load_key(cast.alice_key)
    assert (info.policy.within_principal, info.policy.aging_seconds) == ("sjf", 0.0)


def test_a_tier_left_blank_keeps_the_gateways_order_and_aging(cast) -> None:
    info = load_key(cast.alice_key)
    assert (info.policy.within_principal, info.policy.aging_seconds) == (None, None)
