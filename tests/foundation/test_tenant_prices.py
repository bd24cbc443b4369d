"""A tenant's own price for a model (a negotiated rate) overrides the list price for that
tenant's usage from its effective date; all prices share one currency."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError
from django.utils import timezone

from llmserver.runtime.config import load_gateway_config
from llmserver.runtime.usage import UsageDraft, price
from tenants.models import CostRule, UsageStatus

JAN = datetime(2026, 1, 1, tzinfo=UTC)
MAR = datetime(2026, 3, 1, tzinfo=UTC)
FEB_15 = datetime(2026, 2, 15, tzinfo=UTC)
MAR_2 = datetime(2026, 3, 2, tzinfo=UTC)


@pytest.fixture
def negotiated(cast):
    """List price 4 per million from January; Acme pays 1 per million from March."""
    CostRule.objects.create(
        model="llama", input_per_million=4, output_per_million=4, effective_from=JAN
    )
    CostRule.objects.create(
        model="llama",
        tenant=cast.acme,
        input_per_million=1,
        output_per_million=1,
        effective_from=MAR,
    )
    return cast


def test_before_its_effective_date_the_tenant_pays_the_list_price(negotiated):
    rule = CostRule.objects.price_at("llama", FEB_15, negotiated.acme.pk)
    assert rule.input_per_million == 4


def test_from_its_effective_date_the_tenant_pays_its_own_price(negotiated):
    assert CostRule.objects.price_at("llama", MAR, negotiated.acme.pk).input_per_million == 1


def test_other_tenants_keep_the_list_price(negotiated):
    assert CostRule.objects.price_at("llama", MAR_2, negotiated.globex.pk).input_per_million == 4
    assert CostRule.objects.price_at("llama", MAR_2).input_per_million == 4


def test_a_tenants_price_for_one_model_leaves_its_other_models_at_their_list_price(negotiated):
    CostRule.objects.create(
        model="*", input_per_million=9, output_per_million=9, effective_from=JAN
    )
    assert CostRule.objects.price_at("mistral", MAR_2, negotiated.acme.pk).input_per_million == 9


def draft(tenant_id: int, queued_at: datetime, request_id: str) -> UsageDraft:
    return UsageDraft(
        request_id=request_id,
        tenant_id=tenant_id,
        tenant_slug="",
        api_key_id=None,
        user="u",
        model="llama",
        tier="t",
        band=0,
        queued_at=queued_at,
        prompt_tokens=1_000_000,
        completion_tokens=0,
        status=UsageStatus.OK,
    )


def test_usage_rows_are_billed_at_the_tenants_price_in_force_when_queued(negotiated):
    acme, globex = negotiated.acme.pk, negotiated.globex.pk
    rows = price([draft(acme, FEB_15, "a"), draft(acme, MAR_2, "b"), draft(globex, MAR_2, "c")])
    assert [r.cost for r in rows] == [Decimal(4), Decimal(1), Decimal(4)]


def test_the_money_unit_charges_the_tenant_its_own_price(cast, settings):
    from llmserver.conf import gateway_settings
    from tenants.models import Backend, ModelRoute

    backend = Backend.objects.create(name="b", base_url="http://127.0.0.1:9", kind="vllm")
    ModelRoute.objects.create(public_name="llama", backend=backend)
    past = timezone.now() - timedelta(days=1)
    CostRule.objects.create(
        model="llama", input_per_million=4, output_per_million=8, effective_from=past
    )
    CostRule.objects.create(
        model="llama",
        tenant=cast.acme,
        input_per_million=1,
        output_per_million=2,
        effective_from=past,
    )
    config = load_gateway_config(gateway_settings())
    assert config.prices == {"llama": (4.0, 8.0)}
    assert config.tenant_prices == {cast.acme.pk: {"llama": (1.0, 2.0)}}


def test_a_price_in_a_second_currency_is_refused(db):
    CostRule.objects.create(
        model="llama", input_per_million=1, output_per_million=1, effective_from=JAN
    )
    euro = CostRule(
        model="mistral",
        input_per_million=1,
        output_per_million=1,
        effective_from=JAN,
        currency="EUR",
    )
    with pytest.raises(ValidationError, match="USD"):
        euro.full_clean()
