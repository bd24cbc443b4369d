"""The scheduler: fair queues, priority bands, cost-weighted fair share and the metric gate."""
