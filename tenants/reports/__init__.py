"""Usage and cost reports: aggregation queries, CSV export, charts and the admin views."""
