-- budget.lock_run_v1: current definition, applied by the repeatable step of
-- servicekit/migrations.py whenever this file changes (issue 22: the engine is the only writer).
--
-- Locks one run for a lifecycle call (CloseRun, ResumeRun, the sweeper's expiry) the way every
-- writer does, then ends its overdue holds:
--   1. the run row FOR UPDATE (SKIP LOCKED for the sweeper: a busy run is expired by the call
--      that holds it, or by the next sweep);
--   2. a twin of p_request_id that committed while this call waited for the lock is reported
--      ('applied': its stored reply is replayed, the request is not applied again);
--   3. the current window of every pooled budget the run draws on gets its row, then those
--      rows and the windows of the holds this call may end (the overdue ones, or every open
--      one when p_all_open) are locked in the canonical order;
--   4. each overdue hold expires (oldest first); the ledger rows carry p_request_id.
-- status: 'locked', 'missing' (no such run, or busy) or 'applied'; expired: holds expired.
CREATE OR REPLACE FUNCTION budget.lock_run_v1(
    p_tenant text, p_run_id text, p_request_id text, p_skip_locked boolean,
    p_all_open boolean, OUT status text, OUT expired integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_now constant timestamptz := now();
    v_run record;
    v_scopes text[];
    v_ids text[];
    v_windows timestamptz[];
    v_id text;
BEGIN
    expired := 0;
    IF p_skip_locked THEN
        SELECT r.pool_scopes, r.pool_scope_ids INTO v_run FROM budget.runs r
        WHERE r.tenant_id = p_tenant AND r.run_id = p_run_id FOR UPDATE SKIP LOCKED;
    ELSE
        SELECT r.pool_scopes, r.pool_scope_ids INTO v_run FROM budget.runs r
        WHERE r.tenant_id = p_tenant AND r.run_id = p_run_id FOR UPDATE;
    END IF;
    IF NOT FOUND THEN
        status := 'missing';
        RETURN;
    END IF;
    -- The idempotency check ran before the lock; every change to this run is serialized behind
    -- it, so a twin that committed meanwhile is visible to this statement.
    IF p_request_id IS NOT NULL AND EXISTS (
        SELECT 1 FROM budget.request_log l
        WHERE l.tenant_id = p_tenant AND l.request_id = p_request_id) THEN
        status := 'applied';
        RETURN;
    END IF;
    -- Holds can only draw on the pools the run was opened with; a deleted pooled budget no
    -- longer binds (no current window), though its rows still give back what its holds held.
    IF cardinality(v_run.pool_scopes) > 0 THEN
        SELECT array_agg(s.scope), array_agg(s.scope_id),
               array_agg(budget.window_start_v1(s.window_kind, v_now))
        INTO v_scopes, v_ids, v_windows
        FROM budget.scope_budgets s
        WHERE s.tenant_id = p_tenant AND s.kind = 'pooled'
          AND (s.scope, s.scope_id) IN (
              SELECT * FROM unnest(v_run.pool_scopes, v_run.pool_scope_ids));
        PERFORM budget.open_pool_windows_v1(p_tenant, v_scopes, v_ids, v_windows);
        SELECT v_scopes || array_agg(k.scope), v_ids || array_agg(k.scope_id),
               v_windows || array_agg(k.w)
        INTO v_scopes, v_ids, v_windows
        FROM budget.holds h
        CROSS JOIN LATERAL unnest(h.pool_scopes, h.pool_scope_ids, h.pool_windows)
             AS k(scope, scope_id, w)
        WHERE h.tenant_id = p_tenant AND h.run_id = p_run_id AND h.state = 'open'
          AND (h.expires_at <= v_now OR p_all_open);
        PERFORM 1 FROM budget.lock_pool_rows_v1(p_tenant, v_scopes, v_ids, v_windows);
    END IF;
    FOR v_id IN
        SELECT h.reservation_id FROM budget.holds h
        WHERE h.tenant_id = p_tenant AND h.run_id = p_run_id AND h.state = 'open'
          AND h.expires_at <= v_now
        ORDER BY h.created_at, h.reservation_id COLLATE "C"
    LOOP
        PERFORM budget.end_hold_v1(p_tenant, p_run_id, v_id, 'expired', 'expire', p_request_id);
        expired := expired + 1;
    END LOOP;
    status := 'locked';
END;
$$;
