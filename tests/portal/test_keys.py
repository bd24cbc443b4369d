"""A tenant's administrators and members manage API keys in the portal, within what the operator
granted; a key made here works on the API and its secret is shown once."""

from __future__ import annotations

import re
from datetime import timedelta
from decimal import Decimal

from django.urls import reverse
from django.utils import timezone

from tenants.models import ApiKey, AuditEntry

SECRET = re.compile(r"sk-llms-[A-Za-z0-9_-]{40}")


def create(client, **fields):
    body = {"name": "ci", "user": "deploy-bot", "app_type": "api", "allowed_models": "", **fields}
    return client.post(reverse("portal:keys", args=["acme"]), body)


def test_an_administrator_creates_a_key_and_sees_its_secret_once(people, cast):
    response = create(people.ada, name="ci", allowed_models="llama-*, mistral")
    secret = SECRET.search(response.content.decode()).group(0)
    key = ApiKey.objects.for_key(secret)
    assert key is not None and key.tenant == cast.acme and key.user == "deploy-bot"
    assert key.allowed_models == "llama-*, mistral"
    assert response["Cache-Control"] == "no-store"
    assert secret not in people.ada.get(reverse("portal:keys", args=["acme"])).content.decode()


def test_a_members_key_always_acts_for_the_member(people):
    secret = SECRET.search(create(people.ben, user="alice").content.decode()).group(0)
    assert ApiKey.objects.for_key(secret).user == "ben"


def test_a_member_sees_only_the_keys_that_act_for_them(people, cast):
    create(people.ben, name="mine")
    page = people.ben.get(reverse("portal:keys", args=["acme"])).content.decode()
    assert "mine" in page and cast.alice.prefix not in page and cast.bob.prefix not in page


def test_an_administrator_sees_every_key_of_the_tenant(people, cast):
    page = people.ada.get(reverse("portal:keys", args=["acme"])).content.decode()
    assert cast.alice.prefix in page and cast.bob.prefix in page


def test_a_key_budget_above_the_tenants_is_refused(people, cast):
    cast.acme.monthly_budget = Decimal("10")
    cast.acme.save()
    response = create(people.ada, monthly_budget="10.01")
    assert response.status_code == 200 and "cannot exceed the tenant" in response.content.decode()
    assert not ApiKey.objects.filter(name="ci").exists()
    create(people.ada, monthly_budget="10")
    assert ApiKey.objects.get(name="ci").monthly_budget == Decimal("10")


def test_an_expiry_in_the_past_is_refused(people):
    past = (timezone.now() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M")
    assert "must be in the future" in create(people.ada, expires_at=past).content.decode()
    assert not ApiKey.objects.filter(name="ci").exists()


def test_a_model_list_with_garbage_is_refused(people):
    assert (
        "Not a model name" in create(people.ada, allowed_models="llama, <script>").content.decode()
    )


def test_the_tier_cannot_be_set_from_the_portal(people, cast):
    create(people.ada, tier_override=cast.batch.pk)
    assert ApiKey.objects.get(name="ci").tier_override is None


def test_editing_a_key_changes_its_budget_models_and_expiry(people, cast):
    later = (timezone.now() + timedelta(days=30)).strftime("%Y-%m-%dT%H:%M")
    response = people.ada.post(
        reverse("portal:key-edit", args=["acme", cast.alice.pk]),
        {
            "name": "laptop",
            "user": "alice",
            "app_type": "batch",
            "allowed_models": "llama-*",
            "monthly_budget": "5",
            "expires_at": later,
        },
    )
    assert response.status_code == 302
    key = ApiKey.objects.get(pk=cast.alice.pk)
    assert (key.name, key.app_type, key.allowed_models) == ("laptop", "batch", "llama-*")
    assert key.monthly_budget == Decimal("5") and key.expires_at > timezone.now()


def test_rotating_gives_a_new_secret_and_the_old_one_stops_working(people, cast):
    response = people.ada.post(reverse("portal:key-rotate", args=["acme", cast.alice.pk]))
    new = SECRET.search(response.content.decode()).group(0)
    assert ApiKey.objects.for_key(cast.alice_key) is None
    assert ApiKey.objects.for_key(new).pk == cast.alice.pk


def test_a_member_rotates_their_own_key(people):
    old = SECRET.search(create(people.ben).content.decode()).group(0)
    key = ApiKey.objects.for_key(old)
    response = people.ben.post(reverse("portal:key-rotate", args=["acme", key.pk]))
    assert ApiKey.objects.for_key(SECRET.search(response.content.decode()).group(0)).pk == key.pk
    assert ApiKey.objects.for_key(old) is None


def test_revoking_stops_the_key(people, cast):
    people.ada.post(reverse("portal:key-revoke", args=["acme", cast.bob.pk]))
    assert ApiKey.objects.for_key(cast.bob_key) is None
    assert ApiKey.objects.get(pk=cast.bob.pk).revoked


def test_a_revoked_key_cannot_be_rotated_back_to_life(people, cast):
    people.ada.post(reverse("portal:key-revoke", args=["acme", cast.bob.pk]))
    assert (
        people.ada.post(reverse("portal:key-rotate", args=["acme", cast.bob.pk])).status_code == 404
    )


def test_key_changes_are_in_the_audit_with_the_person_who_made_them(people, cast):
    people.ada.post(reverse("portal:key-revoke", args=["acme", cast.bob.pk]))
    entry = AuditEntry.objects.filter(model="tenants.apikey", object_id=str(cast.bob.pk)).first()
    assert entry.actor == "ada" and entry.changes["revoked"] == [False, True]
    assert "revoked" in people.ada.get(reverse("portal:audit", args=["acme"])).content.decode()


def test_changing_a_key_needs_a_post(people, cast):
    for name in ("key-rotate", "key-revoke"):
        assert (
            people.ada.get(reverse(f"portal:{name}", args=["acme", cast.bob.pk])).status_code == 405
        )
    assert ApiKey.objects.for_key(cast.bob_key) is not None


def test_a_member_may_rename_their_key_but_not_loosen_it(people, cast):
    key, _ = ApiKey.objects.create_key(
        tenant=cast.acme,
        user="ben",
        owner=people.ben_user,
        app_type="batch",
        allowed_models="small-*",
        monthly_budget=Decimal("1"),
        expires_at=timezone.now() + timedelta(days=1),
    )
    people.ben.post(
        reverse("portal:key-edit", args=["acme", key.pk]),
        {
            "name": "renamed",
            "app_type": "chat",
            "allowed_models": "",
            "monthly_budget": "",
            "expires_at": "",
        },
    )
    after = ApiKey.objects.get(pk=key.pk)
    assert after.name == "renamed"
    assert (after.app_type, after.allowed_models, after.monthly_budget) == ("batch", "small-*", 1)
    assert after.expires_at == key.expires_at


def test_a_member_does_not_own_a_key_made_for_a_principal_of_their_name(people, cast):
    service, _ = ApiKey.objects.create_key(tenant=cast.acme, user="ben", name="ben-service")
    assert (
        "ben-service" not in people.ben.get(reverse("portal:keys", args=["acme"])).content.decode()
    )
    assert (
        people.ben.post(reverse("portal:key-rotate", args=["acme", service.pk])).status_code == 404
    )
