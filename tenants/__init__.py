"""Tenants, tiers, API keys, quota and cost rules, backends and usage records."""
