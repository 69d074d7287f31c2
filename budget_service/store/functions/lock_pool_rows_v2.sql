-- budget.lock_pool_rows_v2: The batch's pool rows: the current windows created if missing, then
-- every row locked in canonical order (scope workflow < agent < project, scope_id,
-- window_start), the order every writer uses, and read (read-only: read without locks).
--
-- Rows are probed by their keys, never scanned. A pool's held still includes other runs'
-- holds past expiry (their own runs or the sweeper end them); those stop counting at once
-- (DESIGN 3.3), so `other` sums them per row, from the tenant's open holds on pools past
-- expiry (the deciding runs expire their own in this batch). `cardinality(pool_scopes) > 0`
-- is what fits index holds_pooled_by_expiry (migration 0020) and no other: the walk reads the
-- tenant's overdue holds on pools (the sweeper ends them), never its open holds in flight.
CREATE OR REPLACE FUNCTION budget.lock_pool_rows_v2(
    tenant text, INOUT pools budget.engine_pool_v2[], read_only boolean, deciding text[],
    now timestamptz)
LANGUAGE plpgsql AS $$
#variable_conflict use_variable
DECLARE
    rec record; m integer;
BEGIN
    IF NOT read_only THEN
        INSERT INTO budget.pool_balances (tenant_id, scope, scope_id, window_start)
        SELECT tenant, k.scope, k.scope_id, k.window_start FROM unnest(pools) k
        WHERE k.is_current AND (
            SELECT true FROM budget.pool_balances x
            WHERE x.tenant_id = tenant AND x.scope = k.scope AND x.scope_id = k.scope_id
              AND x.window_start = k.window_start LIMIT 1) IS NULL
        ORDER BY budget.scope_rank_v1(k.scope), k.scope_id COLLATE "C", k.window_start
        ON CONFLICT DO NOTHING;
        PERFORM FROM (SELECT k.scope, k.scope_id, k.window_start FROM unnest(pools) k
                      ORDER BY budget.scope_rank_v1(k.scope), k.scope_id COLLATE "C",
                               k.window_start) k
        CROSS JOIN LATERAL (
            SELECT FROM budget.pool_balances y
            WHERE y.tenant_id = tenant AND y.scope = k.scope AND y.scope_id = k.scope_id
              AND y.window_start = k.window_start FOR UPDATE) x;
    END IF;
    FOR rec IN
        SELECT k.ordinality AS m, x.* FROM unnest(pools) WITH ORDINALITY k
        CROSS JOIN LATERAL (
            SELECT y.* FROM budget.pool_balances y
            WHERE y.tenant_id = tenant AND y.scope = k.scope AND y.scope_id = k.scope_id
              AND y.window_start = k.window_start LIMIT 1) x
    LOOP
        m := rec.m;
        pools[m].found := true;
        pools[m].crossed := budget.flag_mask_v1(rec.crossed);
        pools[m].exhausted := budget.flag_mask_v1(rec.exhausted);
        pools[m].next_seq := rec.next_seq;
        pools[m].used := ARRAY[rec.consumed_tokens, rec.consumed_cost_nanos,
                               rec.consumed_tool_calls, rec.consumed_retries,
                               rec.consumed_model_calls];
        pools[m].held := ARRAY[rec.held_tokens, rec.held_cost_nanos, rec.held_tool_calls,
                               rec.held_retries, rec.held_model_calls];
    END LOOP;
    FOR rec IN
        SELECT k.scope, k.scope_id, k.window_start,
               ARRAY[sum(o.granted_tokens), sum(o.granted_cost_nanos),
                     sum(o.granted_tool_calls), sum(o.granted_retries),
                     sum(o.granted_model_calls)]::bigint[] AS s
        FROM budget.holds o
        CROSS JOIN LATERAL unnest(o.pool_scopes, o.pool_scope_ids, o.pool_windows)
             AS k(scope, scope_id, window_start)
        WHERE o.tenant_id = tenant AND o.state = 'open' AND cardinality(o.pool_scopes) > 0
          AND o.expires_at <= now
          AND NOT o.run_id = ANY(deciding)  -- those expire their own in this batch
          AND (k.scope, k.scope_id, k.window_start) IN (
              SELECT p.scope, p.scope_id, p.window_start FROM unnest(pools) p)
        GROUP BY 1, 2, 3
    LOOP
        FOR b IN 1..cardinality(pools) LOOP
            IF pools[b].scope = rec.scope AND pools[b].scope_id = rec.scope_id
               AND pools[b].window_start = rec.window_start THEN
                pools[b].other := rec.s;
            END IF;
        END LOOP;
    END LOOP;
END;
$$;
