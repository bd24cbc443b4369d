"""The admin speaks the operator's language: an "active" column, plain help texts, and links
from the index to the usage report and the live dashboard."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse

from tenants.models import Tier


@pytest.fixture
def staff_client(client, db):
    user = get_user_model().objects.create_user(
        "op", password="x", is_staff=True, is_superuser=True
    )
    client.force_login(user)
    return client


def test_the_key_list_shows_a_working_key_as_active_and_a_revoked_one_as_not(staff_client, cast):
    cast.bob.revoked = True
    cast.bob.save()
    page = staff_client.get(reverse("admin:tenants_apikey_changelist")).content.decode()
    assert "column-active" in page and "column-revoked" not in page
    assert page.count('alt="True"') >= 1 and page.count('alt="False"') == 1


def test_the_admin_index_links_to_the_report_and_the_dashboard(staff_client):
    page = staff_client.get(reverse("admin:index")).content.decode()
    assert reverse("usage-report") in page and reverse("queue-dashboard") in page


def test_tier_help_texts_do_not_cite_the_article():
    for field in Tier._meta.get_fields():
        assert "article" not in str(getattr(field, "help_text", "")).lower()


def test_a_tier_sharing_its_band_shows_the_strictest_gate_in_force(staff_client):
    gold = Tier.objects.create(name="gold-x", band=0, gate_max_waiting=5, gate_max_tpot_ms=200)
    Tier.objects.create(name="silver-x", band=0, gate_max_waiting=2, gate_max_tpot_ms=300)
    Tier.objects.filter(band=0).exclude(name__in=["gold-x", "silver-x"]).delete()
    page = staff_client.get(reverse("admin:tenants_tier_change", args=[gold.pk])).content.decode()
    assert "Shared with silver-x" in page
    assert "waiting 2, time per token 200 ms" in page


def test_a_tier_alone_in_its_band_says_its_own_thresholds_apply(staff_client):
    Tier.objects.filter(band=2).delete()
    alone = Tier.objects.create(name="night-x", band=2)
    page = staff_client.get(reverse("admin:tenants_tier_change", args=[alone.pk])).content.decode()
    assert "no other tier shares its band" in page
