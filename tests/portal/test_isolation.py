"""No page or action of a tenant opens for anyone outside it, and members cannot administer."""

from __future__ import annotations

import pytest
from django.urls import reverse
from django.utils import timezone

from tenants.models import ApiKey, Membership
from tests.reports.usage_data import record

PAGES = ["overview", "queue", "keys", "members", "audit"]
ADMIN_PAGES = ["members", "audit"]


def key_actions(key_id: int) -> list[tuple[str, str, dict[str, object]]]:
    return [
        ("get", "key-edit", {"key_id": key_id}),
        ("post", "key-edit", {"key_id": key_id}),
        ("post", "key-rotate", {"key_id": key_id}),
        ("post", "key-revoke", {"key_id": key_id}),
    ]


@pytest.mark.parametrize("page", PAGES)
def test_a_person_of_another_tenant_gets_404_on_every_page(people, page):
    assert people.gil.get(reverse(f"portal:{page}", args=["acme"])).status_code == 404


@pytest.mark.parametrize("page", PAGES)
def test_every_page_sends_a_stranger_to_sign_in(client, cast, page):
    response = client.get(reverse(f"portal:{page}", args=["acme"]))
    assert response.status_code == 302 and response["Location"].startswith(reverse("portal:login"))


@pytest.mark.parametrize("page", PAGES)
def test_operator_staff_who_are_not_members_get_404(admin_client, cast, page):
    assert admin_client.get(reverse(f"portal:{page}", args=["acme"])).status_code == 404


@pytest.mark.parametrize("action", range(4))
def test_another_tenants_key_cannot_be_reached_through_ones_own_tenant(people, cast, action):
    method, name, kwargs = key_actions(cast.charlie.pk)[action]
    response = getattr(people.ada, method)(
        reverse(f"portal:{name}", kwargs={"slug": "acme", **kwargs})
    )
    assert response.status_code == 404
    charlie = ApiKey.objects.get(pk=cast.charlie.pk)
    assert not charlie.revoked and charlie.prefix == cast.charlie.prefix


@pytest.mark.parametrize("action", range(4))
def test_a_member_cannot_reach_another_members_key(people, cast, action):
    method, name, kwargs = key_actions(cast.alice.pk)[action]
    response = getattr(people.ben, method)(
        reverse(f"portal:{name}", kwargs={"slug": "acme", **kwargs})
    )
    assert response.status_code == 404
    assert not ApiKey.objects.get(pk=cast.alice.pk).revoked


@pytest.mark.parametrize("page", ADMIN_PAGES)
def test_a_member_may_not_open_the_administrators_pages(people, page):
    assert people.ben.get(reverse(f"portal:{page}", args=["acme"])).status_code == 403


def test_a_member_may_not_change_roles_or_remove_anyone(people):
    ada = people.ada_membership
    assert (
        people.ben.post(
            reverse("portal:member-role", args=["acme", people.ben_membership.pk]),
            {"role": "admin"},
        ).status_code
        == 403
    )
    assert (
        people.ben.post(reverse("portal:member-remove", args=["acme", ada.pk])).status_code == 403
    )
    assert Membership.objects.get(pk=people.ben_membership.pk).role == "member"
    assert Membership.objects.filter(pk=ada.pk).exists()


def test_an_administrator_cannot_touch_another_tenants_members(people):
    gil = people.gil_membership
    assert (
        people.ada.post(reverse("portal:member-remove", args=["acme", gil.pk])).status_code == 404
    )
    assert (
        people.ada.post(
            reverse("portal:member-role", args=["acme", gil.pk]), {"role": "member"}
        ).status_code
        == 404
    )
    assert Membership.objects.get(pk=gil.pk).role == "admin"


def test_another_tenants_usage_and_keys_are_not_on_ones_pages(people, cast):
    record("g-1", cast.globex, "charlie", "globex-secret-model", timezone.now(), 100, 50)
    for page in PAGES:
        body = people.ada.get(reverse(f"portal:{page}", args=["acme"])).content.decode()
        assert "globex-secret-model" not in body and cast.charlie.prefix not in body
        assert "charlie" not in body


def test_an_inactive_tenant_has_no_pages(people, cast):
    cast.acme.is_active = False
    cast.acme.save()
    assert people.ada.get(reverse("portal:overview", args=["acme"])).status_code == 404
