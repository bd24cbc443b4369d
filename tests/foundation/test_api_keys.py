"""API keys: stored as prefix + hash, found in constant time, refused when unusable."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from tenants.models import ApiKey, AppType, Band
from tenants.models.keys import PREFIX_LENGTH, hash_key


def test_it_stores_only_the_prefix_and_the_hash(cast):
    stored = ApiKey.objects.get(pk=cast.alice.pk)
    assert stored.prefix == cast.alice_key[:PREFIX_LENGTH]
    assert stored.hashed == hash_key(cast.alice_key)
    assert cast.alice_key not in {str(v) for v in stored.__dict__.values()}


def test_it_finds_the_key_a_secret_belongs_to(cast):
    assert ApiKey.objects.for_key(cast.alice_key) == cast.alice
    assert ApiKey.objects.for_key(cast.charlie_key) == cast.charlie


def test_it_refuses_a_wrong_key_with_a_right_prefix(cast):
    forged = cast.alice_key[:PREFIX_LENGTH] + "x" * (len(cast.alice_key) - PREFIX_LENGTH)
    assert ApiKey.objects.for_key(forged) is None


def test_it_refuses_an_unknown_or_malformed_key(cast):
    assert ApiKey.objects.for_key("sk-llms-" + "a" * 40) is None
    assert ApiKey.objects.for_key("not-a-key") is None
    assert ApiKey.objects.for_key("") is None
    assert ApiKey.objects.for_key("sk-llms-" + "a" * 10_000) is None


def test_it_refuses_a_revoked_key(cast):
    ApiKey.objects.filter(pk=cast.alice.pk).update(revoked=True)
    assert ApiKey.objects.for_key(cast.alice_key) is None


def test_it_refuses_an_expired_key(cast):
    ApiKey.objects.filter(pk=cast.alice.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    assert ApiKey.objects.for_key(cast.alice_key) is None


def test_it_accepts_a_key_that_expires_later(cast):
    ApiKey.objects.filter(pk=cast.alice.pk).update(expires_at=timezone.now() + timedelta(days=1))
    assert ApiKey.objects.for_key(cast.alice_key) == cast.alice


def test_it_refuses_keys_of_an_inactive_tenant(cast):
    cast.acme.is_active = False
    cast.acme.save()
    assert ApiKey.objects.for_key(cast.bob_key) is None


def test_a_batch_app_type_lowers_an_interactive_tier_but_never_raises_a_batch_one(cast):
    cast.alice.app_type = AppType.BATCH
    assert cast.alice.band == Band.BATCH
    cast.bob.tier_override = cast.batch
    cast.bob.app_type = AppType.CHAT
    assert cast.bob.band == Band.BATCH


def test_allowed_models_take_patterns_and_blank_means_all(cast):
    assert cast.alice.allows_model("anything")
    cast.alice.allowed_models = "llama-*, mistral-7b"
    assert cast.alice.allows_model("llama-3-8b")
    assert cast.alice.allows_model("mistral-7b")
    assert not cast.alice.allows_model("gpt-4")
