"""Who sees what inside a tenant: one rule for the portal and the API.

In the portal a person acts for themselves: a tenant administrator sees the tenant's, a member
what is theirs (the keys they made, their own usage and lanes; `tenants/portal/views.py`).

On the API a key acts for its `user`, and sees that user's files, batches, requests and
responses, whichever of the user's keys made them. A key acts as a tenant administrator, and
sees the tenant's, when an administrator of its tenant made it for themselves: its `owner` holds
the administrator role there and its `user` is the owner's user name. A key an administrator
makes for someone else acts for that someone, so handing it over hands over nothing more; a key
made by an operator (no owner) acts for its user only. The role is read when the key is loaded,
and a membership change reloads every gateway's keys (`config_changes`), so a demoted
administrator's keys see only their own at once.

Anything not seen is answered as not there (404), the same as an id that does not exist.
"""

from __future__ import annotations

from tenants.models import ApiKey, Membership, Role


def acts_as_administrator(key: ApiKey) -> bool:
    """Whether `key` sees its whole tenant (see above); one query."""
    if key.owner_id is None:
        return False
    return Membership.objects.filter(
        user_id=key.owner_id,
        tenant_id=key.tenant_id,
        role=Role.ADMIN,
        user__username=key.user,
    ).exists()
