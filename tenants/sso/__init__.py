"""Single sign-on: OpenID Connect login for the admin and the tenant pages (issue 28).

Off unless `OIDC_RP_CLIENT_ID` is set (`config.py`). mozilla-django-oidc runs the authorization
code flow; this package adds what it leaves to the site: finding the provider's endpoints
(`discovery.py`), matching a person by the provider's `sub`, never by e-mail (`backend.py`,
`SsoIdentity`), turning the roles claim into staff and tenant memberships at every login
(`claims.py`, `grants.py`), and where a login lands or why it was refused (`views.py`).
docs/DEPLOYMENT.md, "Single sign-on", is the operator's side.
"""
