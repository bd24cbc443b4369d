"""The tenant's own pages: its administrators manage members and API keys, everyone in it sees
its usage, budgets, refusals and live queue. Served at /portal/; operators keep the admin."""
