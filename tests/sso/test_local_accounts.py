"""Local accounts are the break-glass: single sign-on never signs in as one, whatever e-mail or
user name the provider asserts, and their password login keeps working beside it."""

from __future__ import annotations

from django.contrib.auth.models import User
from django.test import Client

from tenants.models import SsoIdentity
from tenants.sso.config import SsoConfig
from tests.sso.provider import Provider, login


def test_an_sso_login_cannot_take_over_a_local_account_with_its_name_and_email(
    sso: SsoConfig, provider: Provider
) -> None:
    root = User.objects.create_superuser("root", email="root@example.com", password="pw-local-1")
    client = Client()
    response = login(
        client,
        provider,
        "attacker",
        preferred_username="root",
        email="root@example.com",
        email_verified=True,
        groups=["llmserver:operators"],
    )
    assert response["Location"] == "/admin/"
    newcomer = User.objects.get(sso_identity__subject="attacker")
    assert newcomer.pk != root.pk
    assert (newcomer.username, newcomer.is_superuser) == ("root-2", False)
    assert client.session["_auth_user_id"] == str(newcomer.pk)
    root.refresh_from_db()
    assert not SsoIdentity.objects.filter(user=root).exists()
    assert root.check_password("pw-local-1") and root.is_superuser


def test_the_password_login_still_works_with_single_sign_on_on(sso: SsoConfig) -> None:
    User.objects.create_user("breakglass", password="pw-local-2", is_staff=True)
    client = Client()
    page = client.get("/admin/login/?next=/admin/")
    assert 'href="/oidc/authenticate/?next=/admin/"' in page.content.decode()
    response = client.post(
        "/admin/login/?next=/admin/",
        {"username": "breakglass", "password": "pw-local-2", "next": "/admin/"},
    )
    assert (response.status_code, response["Location"]) == (302, "/admin/")
    assert client.get("/admin/").status_code == 200
