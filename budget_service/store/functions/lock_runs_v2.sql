-- budget.lock_runs_v2: The runs of a lifecycle call (budget.lock_run_v1, append_run_event_v1)
-- and of the waiting engine entries, locked waiting (or, read_only, read without locks): the
-- signature those callers were written against, kept so none of them changes. The one
-- definition of how runs are locked and loaded is budget.lock_runs_v3.
CREATE OR REPLACE FUNCTION budget.lock_runs_v2(
    tenant text, run_ids text[], read_only boolean, now timestamptz,
    OUT runs budget.engine_run_v2[], OUT found_ids text[], OUT any_pools boolean,
    OUT any_overdue boolean)
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
BEGIN
    SELECT l.runs, l.found_ids, l.any_pools, l.any_overdue
    INTO runs, found_ids, any_pools, any_overdue
    FROM budget.lock_runs_v3(tenant, run_ids, CASE WHEN read_only THEN 'read' ELSE 'wait' END,
                             now) l;
END;
$$;
