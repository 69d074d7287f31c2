-- budget.lock_run_v1: current definition, applied by the repeatable step of
-- servicekit/migrations.py whenever this file changes (issue 22: the engine is the only writer).
--
-- Locks one run for a lifecycle call (CloseRun, ResumeRun, the sweeper's expiry) the way every
-- writer does, then ends its overdue holds (and, for CloseRun, the open ones):
--   1. the run row FOR UPDATE (SKIP LOCKED for the sweeper: a busy run is expired by the call
--      that holds it, or by the next sweep);
--   2. a twin of p_request_id that committed while this call waited for the lock is reported
--      ('applied': its stored reply is replayed, the request is not applied again);
--   3. the run and the holds this call may end (the overdue ones, or every open one when
--      p_release) are loaded, the current window of every pooled budget the run draws on gets
--      its row, and those rows and the holds' are locked in the canonical order, by the
--      engine's own steps (budget.lock_runs_v2, batch_pools_v2);
--   4. each overdue hold expires (budget.expire_holds_v2, oldest first; the ledger rows carry
--      p_request_id); with p_release, unless the run already has an outcome, every hold still
--      open is then released (budget.hold_end_v2, oldest first); the engine writes it all
--      (budget.write_balances_v2, write_records_v2).
-- status: 'locked', 'missing' (no such run, or busy) or 'applied'; expired, released: holds
-- this call ended.
CREATE OR REPLACE FUNCTION budget.lock_run_v1(
    p_tenant text, p_run_id text, p_request_id text, p_skip_locked boolean,
    p_release boolean, OUT status text, OUT expired integer, OUT released integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_now constant timestamptz := now();
    v_run constant text[] := ARRAY[p_run_id];
    v_outcome text;
    v_named text[] := '{}';
    loaded record;
    ended record;
    runs budget.engine_run_v2[];
    pools budget.engine_pool_v2[] := '{}';
    holds budget.engine_hold_v2[] := '{}';
    ledger budget.engine_ledger_v2[] := '{}';
BEGIN
    expired := 0;
    released := 0;
    IF p_skip_locked THEN
        SELECT r.outcome INTO v_outcome FROM budget.runs r
        WHERE r.tenant_id = p_tenant AND r.run_id = p_run_id FOR UPDATE SKIP LOCKED;
    ELSE
        SELECT r.outcome INTO v_outcome FROM budget.runs r
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
    status := 'locked';
    -- The run row is locked above: the engine's lock of it does not wait.
    loaded := budget.lock_runs_v2(p_tenant, v_run, false, v_now);
    runs := loaded.runs;
    runs[1].first_request := p_request_id;
    IF p_release THEN
        v_named := ARRAY(SELECT h.reservation_id FROM budget.holds h
                         WHERE h.tenant_id = p_tenant AND h.run_id = p_run_id
                           AND h.state = 'open');
    END IF;
    -- Holds can only draw on the pools the run was opened with; a deleted pooled budget no
    -- longer binds (no current window), though its rows still give back what its holds held.
    SELECT * INTO runs, pools, holds FROM budget.batch_pools_v2(
        p_tenant, runs, array_fill(p_run_id, ARRAY[cardinality(v_named)]), v_named, v_run,
        loaded.any_pools, loaded.any_overdue, false, v_now);
    IF cardinality(holds) = 0 THEN
        RETURN;
    END IF;
    SELECT * INTO runs, pools, holds, ledger
    FROM budget.expire_holds_v2(runs, pools, holds, v_run, v_now);
    expired := runs[1].expired;
    FOR h IN 1..CASE WHEN p_release AND v_outcome IS NULL THEN cardinality(holds) ELSE 0 END
    LOOP
        CONTINUE WHEN holds[h].state <> 'open';
        ended := budget.hold_end_v2(runs[1], budget.pools_at_v2(pools, holds[h].pools),
                                    holds[h], 'released', p_request_id);
        runs[1] := ended.run;
        holds[h] := ended.hold;
        FOR b IN 1..coalesce(cardinality(holds[h].pools), 0) LOOP
            pools[holds[h].pools[b]] := ended.pools[b];
        END LOOP;
        ledger := ledger || ended.ledger;
        released := released + 1;
    END LOOP;
    PERFORM budget.write_balances_v2(p_tenant, runs, pools, v_now);
    PERFORM budget.write_records_v2(p_tenant, runs, pools, holds, ledger, '{}', '{}', '{}', '{}',
                                    v_now);
END;
$$;
