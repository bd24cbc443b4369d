"""An operator claim makes staff who reaches the admin, in the operators' group, not superuser."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.test import Client

from tenants.sso.config import SsoConfig
from tests.sso.provider import Provider, login


def test_an_operator_claim_makes_staff_who_reaches_the_admin(
    sso: SsoConfig, provider: Provider
) -> None:
    client = Client()
    response = login(
        client, provider, "op-1", preferred_username="olga", groups=["llmserver:operators"]
    )
    assert (response.status_code, response["Location"]) == (302, "/admin/")
    assert client.get("/admin/").status_code == 200
    user = User.objects.get(sso_identity__subject="op-1", sso_identity__issuer=provider.issuer)
    assert (user.username, user.is_staff, user.is_superuser) == ("olga", True, False)
    assert list(user.groups.values_list("name", flat=True)) == [sso.operators_group]
    assert not user.has_usable_password()
