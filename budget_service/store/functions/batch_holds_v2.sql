-- budget.batch_holds_v2: The holds a batch may end: every open hold of its runs that is past
-- its expiry, and each hold an item names (Consume, Release), each loaded once.
--
-- Both are found from the batch's own keys, never by reading the tenant's holds: the overdue
-- ones by the runs' (tenant, run, expiry) index of open holds, the named ones by primary key.
-- An open hold's pool rows join the batch's pools (`pools`, by position: a row of an earlier
-- window is added, not current, its limits unknown) so that ending it can release them;
-- an ended hold can no longer change them. Ordered by run (COLLATE "C"), creation, id.
CREATE OR REPLACE FUNCTION budget.batch_holds_v2(
    tenant text, runs budget.engine_run_v2[], named_runs text[], named_ids text[],
    INOUT pools budget.engine_pool_v2[], any_overdue boolean, now timestamptz,
    OUT holds budget.engine_hold_v2[])
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_variable
DECLARE
    run_ids constant text[] := ARRAY(SELECT r.run_id FROM unnest(runs) r);
    rec record; slots integer[]; m integer; k integer;
BEGIN
    holds := '{}';
    FOR rec IN
        SELECT o.* FROM (
            SELECT h.* FROM unnest(CASE WHEN any_overdue THEN run_ids END) AS w(run_id)
            CROSS JOIN LATERAL (
                SELECT * FROM budget.holds x
                WHERE x.tenant_id = tenant AND x.run_id = w.run_id AND x.state = 'open'
                  AND x.expires_at <= now OFFSET 0) h
            UNION ALL
            SELECT h.* FROM unnest(named_runs, named_ids) AS w(run_id, reservation_id)
            CROSS JOIN LATERAL (
                SELECT * FROM budget.holds x
                WHERE x.tenant_id = tenant AND x.run_id = w.run_id
                  AND x.reservation_id = w.reservation_id LIMIT 1) h
        ) o
        ORDER BY o.run_id COLLATE "C", o.created_at, o.reservation_id COLLATE "C"
    LOOP
        k := array_position(run_ids, rec.run_id);
        CONTINUE WHEN EXISTS (  -- a named hold may also be overdue: loaded once
            SELECT FROM unnest(holds) y WHERE y.reservation_id = rec.reservation_id AND y.run = k);
        slots := '{}';
        FOR j IN 1..CASE WHEN rec.state = 'open' THEN cardinality(rec.pool_scopes) ELSE 0 END
        LOOP
            m := NULL;
            FOR b IN 1..cardinality(pools) LOOP
                IF pools[b].scope = rec.pool_scopes[j] AND pools[b].scope_id = rec.pool_scope_ids[j]
                   AND pools[b].window_start = rec.pool_windows[j] THEN
                    m := b;
                    EXIT;
                END IF;
            END LOOP;
            IF m IS NULL THEN
                pools := pools || ROW(
                    rec.pool_scopes[j], rec.pool_scope_ids[j], rec.pool_windows[j], NULL::text,
                    false, false, '{NULL,NULL,NULL,NULL,NULL}'::bigint[], '{0,0,0,0,0}'::bigint[],
                    '{0,0,0,0,0}'::bigint[], '{0,0,0,0,0}'::bigint[], 80, NULL::text, 0, 0,
                    1::bigint, 0, false)::budget.engine_pool_v2;
                m := cardinality(pools);
            END IF;
            slots := slots || m;
        END LOOP;
        holds := holds || ROW(
            rec.reservation_id, k, rec.model, rec.state, rec.state = 'open', false,
            ARRAY[rec.requested_tokens, rec.requested_cost_nanos, rec.requested_tool_calls,
                  rec.requested_retries],
            ARRAY[rec.granted_tokens, rec.granted_cost_nanos, rec.granted_tool_calls,
                  rec.granted_retries, rec.granted_model_calls],
            slots, rec.created_at, rec.expires_at, rec.policy_version)::budget.engine_hold_v2;
    END LOOP;
END;
$$;
