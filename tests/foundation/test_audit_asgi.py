"""Served over ASGI (daphne, `rungateway`), the middleware runs as a coroutine and the admin's
view on a worker thread: the change still names the admin user and the address."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import AsyncClient

from tests.foundation.audit_helpers import entries, form_data, operator


@pytest.mark.django_db(transaction=True)
async def test_an_admin_change_over_asgi_records_the_user_and_address(cast: Any) -> None:
    from asgiref.sync import sync_to_async

    user = await sync_to_async(operator)("root")
    client = AsyncClient()  # its scope's peer is 127.0.0.1
    await client.aforce_login(user)
    response = await client.post(
        f"/admin/tenants/tier/{cast.batch.pk}/change/",
        form_data(cast.batch, weight=5.0),
    )
    assert response.status_code == 302
    [entry] = await sync_to_async(entries)("tenants.tier", "update")
    assert (entry.actor, entry.address, entry.changes) == (
        "root",
        "127.0.0.1",
        {"weight": [1.0, 5.0]},
    )
