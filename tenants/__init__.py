"""Tenants, tiers, API keys, quota and cost rules, backends and their kinds' profiles, and usage
records."""
