"""Budget use cases: each call one transaction with its idempotency by request_id (transactions),
Reserve/Consume/Release/Check batched to the ledger's decision function (group commit), run
lifecycle, scope budgets and event reads, spend reports, and the sweeper; settings they honour.

- `notifier`: `ration notify`: follows tenants' event streams and POSTs the chosen events to
  webhooks.
- `notify_settings`: `ration notify` configuration: RATION_NOTIFY_* variables and the webhooks
  file they name.
- `reports`: Budget use case of spend reports: one page of sums, read in the caller's tenant.
- `reservations`: Budget use cases of the per-call protocol: Reserve, Consume, Release and Check.
- `runs`: Budget use cases of run lifecycle, scope budgets and event reads: one transaction each.
- `settings`: Budget service configuration: host enforcement mode, ceilings and hold lifetimes.
- `stream_slots`: Concurrent event streams per tenant, capped so one tenant cannot hold them all.
- `sweeper`: Background upkeep on every replica: expire overdue holds, forget old requests, gauges.
- `tenant_events`: Budget use cases of the tenant event stream: pages in the tenant's order,
  followed live.
- `transactions`: Transaction boundaries of the budget use cases: idempotent mutations, reads,
  metrics.
"""
