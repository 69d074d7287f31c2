-- budget.expire_run_v1: current definition, applied by the repeatable step of
-- servicekit/migrations.py whenever this file changes (issue 22: the engine is the only writer).
--
-- The sweeper's expiry of one run: lock it unless another call holds it (that call, or the
-- next sweep, expires its holds), then every overdue hold expires with no request id.
-- Returns how many holds expired (0 for a busy or vanished run).
CREATE OR REPLACE FUNCTION budget.expire_run_v1(p_tenant text, p_run_id text)
RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    v_expired integer;
BEGIN
    PERFORM budget.enter_tenant_v1(p_tenant);
    SELECT l.expired INTO v_expired
    FROM budget.lock_run_v1(p_tenant, p_run_id, NULL, true, false) AS l;
    RETURN v_expired;
END;
$$;
