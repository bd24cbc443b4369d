"""A tenant's administrators add people, set their role and remove them; a tenant always keeps
an administrator."""

from __future__ import annotations

from django.contrib.auth import get_user_model
from django.urls import reverse

from tenants.models import ApiKey, AuditEntry, Membership, Role


def test_an_administrator_adds_an_existing_account_by_e_mail(people, cast):
    get_user_model().objects.create_user("dee", "Dee@Example.com", "pw-long-x")
    people.ada.post(
        reverse("portal:members", args=["acme"]), {"person": "dee@example.com", "role": "member"}
    )
    assert Membership.objects.get(user__username="dee").tenant == cast.acme


def test_an_unknown_person_is_refused_with_a_reason(people):
    response = people.ada.post(
        reverse("portal:members", args=["acme"]), {"person": "nobody", "role": "member"}
    )
    assert "No single account" in response.content.decode()


def test_a_person_already_in_the_tenant_is_not_added_twice(people):
    response = people.ada.post(
        reverse("portal:members", args=["acme"]), {"person": "ben", "role": "admin"}
    )
    assert "already a member" in response.content.decode()
    assert Membership.objects.get(user__username="ben").role == Role.MEMBER


def test_a_member_of_another_tenant_can_be_added_with_its_own_role(people):
    people.ada.post(reverse("portal:members", args=["acme"]), {"person": "gil", "role": "member"})
    assert {m.tenant.slug: m.role for m in Membership.objects.filter(user__username="gil")} == {
        "acme": "member",
        "globex": "admin",
    }


def test_an_administrator_promotes_a_member(people):
    people.ada.post(
        reverse("portal:member-role", args=["acme", people.ben_membership.pk]), {"role": "admin"}
    )
    assert Membership.objects.get(pk=people.ben_membership.pk).role == Role.ADMIN


def test_the_last_administrator_cannot_step_down_or_leave(people):
    ada = people.ada_membership
    people.ada.post(reverse("portal:member-role", args=["acme", ada.pk]), {"role": "member"})
    response = people.ada.post(reverse("portal:member-remove", args=["acme", ada.pk]), follow=True)
    assert "keeps at least one administrator" in response.content.decode()
    assert Membership.objects.get(pk=ada.pk).role == Role.ADMIN


def test_removing_a_member_closes_the_tenant_to_them(people):
    people.ada.post(reverse("portal:member-remove", args=["acme", people.ben_membership.pk]))
    assert people.ben.get(reverse("portal:overview", args=["acme"])).status_code == 404


def test_membership_changes_are_audited_for_the_tenant(people):
    people.ada.post(
        reverse("portal:member-role", args=["acme", people.ben_membership.pk]), {"role": "admin"}
    )
    entry = AuditEntry.objects.get(model="tenants.membership", action="update")
    assert entry.actor == "ada" and entry.changes["role"] == ["member", "admin"]
    assert (
        "tenants.membership"
        in people.ada.get(reverse("portal:audit", args=["acme"])).content.decode()
    )


def test_removing_a_member_revokes_the_keys_they_made(people, cast):
    people.ben.post(
        reverse("portal:keys", args=["acme"]),
        {"name": "b", "app_type": "api", "allowed_models": ""},
    )
    (mine,) = ApiKey.objects.filter(owner=people.ben_user)
    people.ada.post(reverse("portal:member-remove", args=["acme", people.ben_membership.pk]))
    assert ApiKey.objects.get(pk=mine.pk).revoked
    assert not ApiKey.objects.get(pk=cast.bob.pk).revoked
