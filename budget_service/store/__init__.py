"""Budget storage on PostgreSQL: every SQL string (literal, $n parameters, filtered on tenant_id),
row <-> record mapping, the stored reply documents, the LISTEN hub for live events and the
forward-only numbered migrations.

- `decisions`: Budget SQL of the per-call protocol: a batch of one tenant decided by
  budget.decide_v2.
- `event_hub`: Live run events: one LISTEN connection per process fanning out to per-run
  subscribers.
- `functions/`: the engine's stored functions, one per file (the ledger's only writer).
- `lifecycle`: Budget SQL of the run lifecycle: OpenRun, CloseRun, ResumeRun and the sweeper's
  expiry, each one call of an engine function.
- `migrations/`: forward-only numbered SQL migrations, applied in order: 0001_schema,
  0002_budget_tables, 0003_budget_fast_path, 0004_budget_total_bounds, 0005_row_level_security,
  0006_budget_decide_v1, 0007_ledger_spend_index, 0008_tenant_event_order,
  0009_notify_progress.
- `notify_progress`: Budget SQL of `ration notify`'s progress: per tenant and webhook, a position
  and a lease.
- `reads`: Budget SQL that reads runs, writes scope budgets, and serves the sweeper.
- `report_slots`: Budget SQL of report slots: a tenant's report statements at once, bounded
  across replicas.
- `reports`: Budget SQL of spend reports: one page of sums per owner, model or time, read in
  O(page).
- `rows`: Mapping between database rows (and write documents) and the budget domain records.
- `stored_replies`: Stored replies of Reserve, Consume and Release: the JSON documents the request
  log keeps.
- `tenant_events`: Budget SQL of the tenant event stream: a tenant's events in (tx, run_id, seq)
  order.
- `watchers`: Budget SQL of the watchers table: which runs some process follows with WatchRunEvents.
"""
