"""People of the shared cast: ada administers acme, ben is a member of acme, gil administers
globex; each is signed in on their own client."""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tenants.models import Membership, Role


@dataclass
class People:
    ada: Client
    ben: Client
    gil: Client
    ada_membership: Membership
    ben_membership: Membership
    gil_membership: Membership

    @property
    def ben_user(self) -> object:
        return self.ben_membership.user


def signed_in(username: str) -> tuple[Client, object]:
    user = get_user_model().objects.create_user(username, f"{username}@example.com", "pw-long-x")
    client = Client()
    client.force_login(user)
    return client, user


@pytest.fixture
def people(cast) -> People:
    ada, ada_user = signed_in("ada")
    ben, ben_user = signed_in("ben")
    gil, gil_user = signed_in("gil")
    return People(
        ada,
        ben,
        gil,
        Membership.objects.create(user=ada_user, tenant=cast.acme, role=Role.ADMIN),
        Membership.objects.create(user=ben_user, tenant=cast.acme, role=Role.MEMBER),
        Membership.objects.create(user=gil_user, tenant=cast.globex, role=Role.ADMIN),
    )
