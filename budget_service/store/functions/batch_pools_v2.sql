-- budget.batch_pools_v2: Step 3 of a batch (budget.decide_batch_v2) and of a lifecycle call
-- (budget.lock_run_v1), after their runs are locked: the current window of every pooled budget
-- the deciding runs draw on (budget.pool_windows_v2), the holds that may end here
-- (budget.batch_holds_v2: the runs' overdue ones when `any_overdue`, and the named ones) with
-- their pool rows, then every pool row created if current and missing, locked in the canonical
-- order and read (budget.lock_pool_rows_v2; read-only: read without locks).
CREATE OR REPLACE FUNCTION budget.batch_pools_v2(
    tenant text, INOUT runs budget.engine_run_v2[], named_runs text[], named_ids text[],
    deciding text[], any_pools boolean, any_overdue boolean, read_only boolean,
    now timestamptz, OUT pools budget.engine_pool_v2[], OUT holds budget.engine_hold_v2[])
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
BEGIN
    pools := '{}';
    holds := '{}';
    IF any_pools THEN
        SELECT * INTO runs, pools FROM budget.pool_windows_v2(tenant, runs, deciding, now);
    END IF;
    IF any_overdue OR cardinality(named_ids) > 0 THEN
        SELECT * INTO pools, holds FROM budget.batch_holds_v2(
            tenant, runs, named_runs, named_ids, pools, any_overdue, now);
    END IF;
    IF cardinality(pools) > 0 THEN
        pools := budget.lock_pool_rows_v2(tenant, pools, read_only, deciding, now);
    END IF;
END;
$$;
