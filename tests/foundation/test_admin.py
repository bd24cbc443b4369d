"""Every model's admin pages render for staff and are refused to anyone else."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.contrib.auth import get_user_model
from django.urls import reverse
from django.utils import timezone

from tenants.models import (
    ApiKey,
    Backend,
    CostRule,
    FairSharePolicy,
    ModelRoute,
    QuotaRule,
    Tenant,
    Tier,
    UsageRecord,
)

MODELS = [
    Tier,
    Tenant,
    ApiKey,
    QuotaRule,
    CostRule,
    FairSharePolicy,
    Backend,
    ModelRoute,
    UsageRecord,
]


@pytest.fixture
def objects(cast):
    backend = Backend.objects.create(name="gpu1", base_url="http://127.0.0.1:9000")
    now = timezone.now()
    return {
        Tier: cast.interactive,
        Tenant: cast.acme,
        ApiKey: cast.alice,
        QuotaRule: QuotaRule.objects.create(tenant=cast.acme, limit=10),
        CostRule: CostRule.objects.create(
            model="*",
            input_per_million=1,
            output_per_million=1,
            effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        ),
        FairSharePolicy: FairSharePolicy.objects.create(unit="money"),
        Backend: backend,
        ModelRoute: ModelRoute.objects.create(public_name="llama", backend=backend),
        UsageRecord: UsageRecord.objects.create(
            request_id="r1",
            tenant=cast.acme,
            user="alice",
            model="llama",
            band=0,
            queued_at=now,
            finished_at=now,
            status="ok",
        ),
    }


@pytest.fixture
def staff_client(client, db):
    user = get_user_model().objects.create_superuser("op", "op@example.com", "pw-long-enough")
    client.force_login(user)
    return client


def url(model, view, *args):
    return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_the_changelist_and_change_page_render_for_staff(staff_client, objects, model):
    assert staff_client.get(url(model, "changelist")).status_code == 200
    assert staff_client.get(url(model, "change", objects[model].pk)).status_code == 200


@pytest.mark.parametrize(
    "model",
    [m for m in MODELS if m not in (UsageRecord, FairSharePolicy)],
    ids=lambda m: m.__name__,
)
def test_the_add_page_renders_for_staff(staff_client, objects, model):
    assert staff_client.get(url(model, "add")).status_code == 200


@pytest.mark.parametrize("model", MODELS, ids=lambda m: m.__name__)
def test_anonymous_users_are_sent_to_the_login_page(client, objects, model):
    response = client.get(url(model, "changelist"))
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_adding_a_key_in_the_admin_shows_its_secret_once(staff_client, cast):
    response = staff_client.post(
        url(ApiKey, "add"),
        {
            "tenant": cast.acme.pk,
            "user": "dave",
            "name": "",
            "app_type": "chat",
            "allowed_models": "",
        },
        follow=True,
    )
    assert response.status_code == 200
    shown = [str(m) for m in response.context["messages"]]
    secret = next(word for m in shown for word in m.split() if word.startswith("sk-llms-"))
    assert ApiKey.objects.for_key(secret).user == "dave"
    assert secret not in staff_client.get(url(ApiKey, "changelist")).content.decode()


def test_usage_records_cannot_be_changed():
    record = UsageRecord(request_id="x")
    record._state.adding = False
    with pytest.raises(ValueError, match="append-only"):
        record.save()


@pytest.mark.django_db
def test_the_fair_share_policy_is_one_row_shown_with_its_unit_and_weights(staff_client):
    FairSharePolicy.objects.create(unit="tokens", input_weight=1.0, output_weight=4.0)
    FairSharePolicy(unit="money").save()  # saving another replaces the one row
    assert FairSharePolicy.objects.count() == 1
    page = staff_client.get(reverse("admin:tenants_fairsharepolicy_changelist"))
    assert b"money" in page.content
    assert staff_client.get(reverse("admin:tenants_fairsharepolicy_add")).status_code == 403
