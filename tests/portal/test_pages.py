"""What the portal shows: the tenant's (or a member's own) usage, budgets, refusals and queue."""

from __future__ import annotations

from decimal import Decimal

from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone

from tenants.models import ApiKey, Membership
from tests.reports.usage_data import record


def test_signing_in_with_one_tenant_lands_on_its_usage(cast, people, client):
    user = get_user_model().objects.get(username="ada")
    user.set_password("pw-long-x")
    user.save()
    response = client.post(
        reverse("portal:login"), {"username": "ada", "password": "pw-long-x"}, follow=True
    )
    assert response.redirect_chain[-1][0] == reverse("portal:overview", args=["acme"])


def test_a_person_in_two_tenants_chooses_one(people, cast):
    Membership.objects.create(user=people.gil_membership.user, tenant=cast.acme)
    page = people.gil.get(reverse("portal:home")).content.decode()
    assert "Acme" in page and "Globex" in page


def test_the_administrator_sees_everyones_usage_this_month(people, cast):
    now = timezone.now()
    record("a1", cast.acme, "alice", "llama-x", now, 1000, 10)
    record("b1", cast.acme, "bob", "llama-x", now, 2000, 20)
    response = people.ada.get(reverse("portal:overview", args=["acme"]))
    assert {row["user"]: row["prompt_tokens"] for row in response.context["by_user"]} == {
        "alice": 1000,
        "bob": 2000,
    }
    assert response.context["totals"]["prompt_tokens"] == 3000


def test_a_member_sees_only_the_usage_of_the_keys_they_made(people, cast):
    now = timezone.now()
    ben_key, _ = ApiKey.objects.create_key(tenant=cast.acme, user="ben", owner=people.ben_user)
    record("a1", cast.acme, "alice", "alice-model", now, 1000, 10, api_key=cast.alice)
    record("b1", cast.acme, "ben", "ben-model", now, 2000, 20, api_key=ben_key)
    # A service key an administrator made under the same principal's name is not the member's.
    record("s1", cast.acme, "ben", "service-model", now, 3000, 30, api_key=cast.bob)
    page = people.ben.get(reverse("portal:overview", args=["acme"])).content.decode()
    assert "ben-model" in page and "alice-model" not in page and "service-model" not in page


def test_a_member_sees_the_refusals_of_their_own_keys_only(people, cast):
    now = timezone.now()
    ben_key, _ = ApiKey.objects.create_key(tenant=cast.acme, user="ben", owner=people.ben_user)
    for i, key in enumerate([ben_key, cast.alice, cast.alice]):
        record(
            f"q{i}",
            cast.acme,
            key.user,
            "m",
            now,
            status="rejected",
            api_key=key,
            error_type="quota_exceeded",
        )
    response = people.ben.get(reverse("portal:overview", args=["acme"]))
    assert dict(response.context["refusals"])["quota"] == 1


def test_refusals_this_month_are_counted_by_cause(people, cast):
    now = timezone.now()
    for i, cause in enumerate(["rate_limit_exceeded", "rate_limit_exceeded", "budget_exceeded"]):
        record(f"r{i}", cast.acme, "alice", "m", now, 0, 0, status="rejected", error_type=cause)
    response = people.ada.get(reverse("portal:overview", args=["acme"]))
    assert dict(response.context["refusals"]) == {"rate limit": 2, "quota": 0, "budget": 1}


def test_the_budget_shows_spend_against_it(people, cast):
    cast.acme.monthly_budget = Decimal("1")
    cast.acme.save()
    response = people.ada.get(reverse("portal:overview", args=["acme"]))
    assert response.context["budget"].budget == Decimal("1")
