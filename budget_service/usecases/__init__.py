"""Budget use cases: each call one transaction with its idempotency by request_id (transactions),
Reserve/Consume/Release/Check on the one-round-trip path or with the run locked, run lifecycle,
scope budgets and event reads, spend reports, the per-run gates and the sweeper; settings they
honour.

- `locked_reservations`: The Python path of Reserve, Consume and Release: one transaction with the
  run locked.
- `locked_run`: One locked run in one transaction: lock, expire overdue holds, apply rules, collect
  changes.
- `reports`: Budget use case of spend reports: one page of sums, read in the caller's tenant.
- `reservations`: Budget use cases of the per-call protocol: Reserve, Consume, Release and Check.
- `run_gates`: A few calls per run at a time from this process: later ones wait here, not on the row
  lock.
- `runs`: Budget use cases of run lifecycle, scope budgets and event reads: one transaction each.
- `settings`: Budget service configuration: host enforcement mode, ceilings and hold lifetimes.
- `stream_slots`: Concurrent WatchRunEvents streams per tenant, capped so one tenant cannot hold
  them all.
- `sweeper`: Background upkeep on every replica: expire overdue holds, forget old requests, gauges.
- `transactions`: Transaction boundaries of the budget use cases: idempotent mutations, reads,
  metrics.
"""
