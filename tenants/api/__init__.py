"""The tenant self-service REST API (DRF), authenticated with the tenant's own API key."""
