-- budget.pool_windows_v2: The current window of every pooled budget the deciding runs draw on,
-- in canonical order (scope workflow < agent < project, then scope_id), and each run's
-- positions among them (run.pools).
--
-- Only runs with a request decided here count (`deciding`): a run with only replays gets no
-- new window row (a replay writes nothing), e.g. a twin retried after midnight. A window is
-- the calendar (or rate) window containing `now` (budget.window_start_v1); its row is created
-- later if missing. Limits, threshold and model match are read live from scope_budgets. The
-- runs' pool lists and the budgets are probed by key, never scanned.
CREATE OR REPLACE FUNCTION budget.pool_windows_v2(
    tenant text, INOUT runs budget.engine_run_v2[], deciding text[], now timestamptz,
    OUT pools budget.engine_pool_v2[])
LANGUAGE plpgsql STABLE AS $$
#variable_conflict use_variable
DECLARE
    rec record;
    k integer;
BEGIN
    pools := '{}';
    FOR rec IN
        SELECT s.scope, s.scope_id, s.window_kind, coalesce(s.threshold_percent, 80) AS threshold,
               s.model_match,
               ARRAY[s.max_tokens, s.max_cost_nanos, s.max_tool_calls, s.max_retries,
                     s.max_model_calls] AS lims,
               array_agg(u.run_id) AS runs
        FROM unnest(deciding) AS w(run_id)
        CROSS JOIN LATERAL (
            SELECT v.run_id, v.pool_scopes, v.pool_scope_ids FROM budget.runs v
            WHERE v.tenant_id = tenant AND v.run_id = w.run_id
              AND cardinality(v.pool_scopes) > 0 LIMIT 1) u
        CROSS JOIN LATERAL unnest(u.pool_scopes, u.pool_scope_ids) AS q(scope, scope_id)
        CROSS JOIN LATERAL (
            SELECT * FROM budget.scope_budgets b
            WHERE b.tenant_id = tenant AND b.scope = q.scope AND b.scope_id = q.scope_id
              AND b.kind = 'pooled' LIMIT 1) s
        GROUP BY s.scope, s.scope_id, s.window_kind, s.threshold_percent, s.model_match,
                 s.max_tokens, s.max_cost_nanos, s.max_tool_calls, s.max_retries,
                 s.max_model_calls
        ORDER BY budget.scope_rank_v1(s.scope), s.scope_id COLLATE "C"
    LOOP
        pools := pools || ROW(
            rec.scope, rec.scope_id, budget.window_start_v1(rec.window_kind, now),
            rec.window_kind, true, false, rec.lims, '{0,0,0,0,0}'::bigint[],
            '{0,0,0,0,0}'::bigint[], '{0,0,0,0,0}'::bigint[], rec.threshold::integer,
            rec.model_match, 0, 0, 1::bigint, 0, false)::budget.engine_pool_v2;
        FOR k IN 1..cardinality(runs) LOOP
            IF runs[k].run_id = ANY(rec.runs) THEN
                runs[k].pools := runs[k].pools || cardinality(pools);
            END IF;
        END LOOP;
    END LOOP;
END;
$$;
