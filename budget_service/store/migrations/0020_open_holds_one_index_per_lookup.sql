-- Each lookup of open holds fits one index, its own (issue 23: a call's cost must not grow
-- with the holds a tenant keeps open, whatever the statistics or plan cache mode). Every
-- index of open holds was partial on state = 'open', so every such lookup fitted all of them,
-- and generic plans made on empty tables took the wrong one: the runs lock's overdue check
-- walked holds_overdue_for_upkeep (the overdue holds of every tenant), and the per-run
-- lookups walked holds_open_by_expiry (the tenant's overdue holds, filtered by run). Each
-- index now adds to state = 'open' a condition only its own lookups state:
--   holds_open_by_run (unchanged): a run's open holds (the engine, the sweeper, reads);
--   holds_pooled_by_expiry: a tenant's open holds on pools by expiry, partial also on
--     cardinality(pool_scopes) > 0, for the overdue sums of pool rows (lock_pool_rows_v2,
--     pool_gauges, store/reads.py); a hold on no pool never counts there;
--   holds_upkeep_by_expiry: every tenant's open holds by expiry, partial also on
--     ended_at IS NULL (the same rows as state = 'open', CHECK of 0002), for
--     budget.overdue_runs alone (migration 0018).
-- The planner proves a partial index usable only from conditions a query states, so a
-- per-run lookup (state = 'open' and a run id) can use no index but the run's and the
-- primary key. Building the two indexes locks writes to budget.holds while they are built,
-- and each DROP INDEX takes an exclusive lock on budget.holds for a moment (CHANGELOG).
CREATE INDEX holds_pooled_by_expiry ON budget.holds (tenant_id, expires_at)
    WHERE state = 'open' AND cardinality(pool_scopes) > 0;
CREATE INDEX holds_upkeep_by_expiry ON budget.holds (expires_at)
    WHERE state = 'open' AND ended_at IS NULL;
DROP INDEX budget.holds_open_by_expiry;
DROP INDEX budget.holds_overdue_for_upkeep;
