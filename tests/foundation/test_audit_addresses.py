"""Where a change came from: the TCP peer, or behind a trusted proxy the client it forwarded."""

from __future__ import annotations

from typing import Any

from tenants.audit_actor import client_address
from tests.foundation.audit_helpers import entries, form_data, logged_in, operator

PROXY = ("10.0.0.0/8",)


def test_without_trusted_proxies_the_peer_is_the_client() -> None:
    meta = {"REMOTE_ADDR": "203.0.113.9", "HTTP_X_FORWARDED_FOR": "1.2.3.4"}
    assert client_address(meta, ()) == "203.0.113.9"


def test_a_forwarded_address_from_an_untrusted_peer_is_ignored() -> None:
    meta = {"REMOTE_ADDR": "203.0.113.9", "HTTP_X_FORWARDED_FOR": "1.2.3.4"}
    assert client_address(meta, PROXY) == "203.0.113.9"


def test_behind_trusted_proxies_the_rightmost_untrusted_hop_is_the_client() -> None:
    # The client claimed 1.2.3.4; the outer proxy saw 198.51.100.7; the inner one 10.0.0.5.
    meta = {"REMOTE_ADDR": "10.0.0.2", "HTTP_X_FORWARDED_FOR": "1.2.3.4, 198.51.100.7, 10.0.0.5"}
    assert client_address(meta, PROXY) == "198.51.100.7"


def test_garbage_in_the_forwarded_header_stops_at_the_last_trusted_hop() -> None:
    meta = {"REMOTE_ADDR": "10.0.0.2", "HTTP_X_FORWARDED_FOR": "unknown, 10.0.0.5"}
    assert client_address(meta, PROXY) == "10.0.0.5"


def test_an_admin_change_through_a_trusted_proxy_records_the_forwarded_client(
    cast: Any, settings
) -> None:
    settings.TRUSTED_PROXIES = ("127.0.0.1",)
    client = logged_in(operator("root"))
    client.post(
        f"/admin/tenants/tier/{cast.batch.pk}/change/",
        form_data(cast.batch, weight=2.0),
        REMOTE_ADDR="127.0.0.1",
        HTTP_X_FORWARDED_FOR="203.0.113.50",
    )
    assert entries("tenants.tier", "update")[-1].address == "203.0.113.50"


def test_an_ipv4_peer_on_a_dual_stack_socket_is_matched_as_ipv4() -> None:
    meta = {"REMOTE_ADDR": "::ffff:10.0.0.2", "HTTP_X_FORWARDED_FOR": "203.0.113.9"}
    assert client_address(meta, PROXY) == "203.0.113.9"
