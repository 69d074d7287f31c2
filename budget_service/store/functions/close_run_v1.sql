-- budget.close_run_v1: current definition, applied by the repeatable step of
-- servicekit/migrations.py whenever this file changes (issue 22: the engine is the only writer).
--
-- CloseRun: releases every open hold of the run (oldest first) and ends it with p_outcome.
-- FAILED stays FAILED (its failure code is the more useful fact), any other state becomes
-- CLOSED; closing a closed run again changes nothing but the expiries its lock found.
-- status: 'done', or budget.lock_run_v1's 'missing' / 'applied'; expired and released count
-- the holds this call ended.
CREATE OR REPLACE FUNCTION budget.close_run_v1(
    p_tenant text, p_run_id text, p_request_id text, p_outcome text,
    OUT status text, OUT expired integer, OUT released integer)
LANGUAGE plpgsql AS $$
DECLARE
    v_version integer;
BEGIN
    PERFORM budget.enter_tenant_v1(p_tenant);
    -- The lock releases every open hold (oldest first) unless the run already has an outcome.
    SELECT l.status, l.expired, l.released INTO status, expired, released
    FROM budget.lock_run_v1(p_tenant, p_run_id, p_request_id, false, true) AS l;
    IF status <> 'locked' THEN
        RETURN;
    END IF;
    status := 'done';
    IF (SELECT r.outcome FROM budget.runs r
        WHERE r.tenant_id = p_tenant AND r.run_id = p_run_id) IS NOT NULL THEN
        RETURN;
    END IF;
    UPDATE budget.runs SET
        state = CASE WHEN state = 'failed' THEN 'failed' ELSE 'closed' END,
        outcome = p_outcome, updated_at = now()
    WHERE tenant_id = p_tenant AND run_id = p_run_id
    RETURNING policy_version INTO v_version;
    INSERT INTO budget.ledger (tenant_id, run_id, request_id, decision, policy_version, detail)
    VALUES (p_tenant, p_run_id, p_request_id, 'close', v_version,
            jsonb_build_object('outcome', p_outcome));
END;
$$;
