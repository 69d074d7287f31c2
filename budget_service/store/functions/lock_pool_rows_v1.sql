-- budget.lock_pool_rows_v1: current definition, applied by the repeatable step of
-- servicekit/migrations.py whenever this file changes (issue 22: the engine is the only writer).
--
-- Locks the given pool balance rows FOR UPDATE in the canonical order (budget.scope_rank_v1,
-- scope_id in "C" collation, window) that every writer of pools uses, so concurrent calls on
-- runs sharing pools cannot deadlock; the run row is always locked before this. Returns the
-- rows as locked (current values), in that order; keys without a row are skipped.
-- PL/pgSQL, not SQL: Citus cannot plan a statement on a distributed table inside an SQL
-- function that uses the function's parameters ("could not create distributed plan").
CREATE OR REPLACE FUNCTION budget.lock_pool_rows_v1(
    p_tenant text, p_scopes text[], p_scope_ids text[], p_windows timestamptz[])
RETURNS TABLE (scope text, scope_id text, window_start timestamptz, used bigint[], held bigint[],
               crossed text[], exhausted text[], next_seq bigint)
LANGUAGE plpgsql AS $$
BEGIN
    RETURN QUERY
    SELECT x.scope, x.scope_id, x.window_start,
           ARRAY[x.consumed_tokens, x.consumed_cost_nanos, x.consumed_tool_calls,
                 x.consumed_retries, x.consumed_model_calls],
           ARRAY[x.held_tokens, x.held_cost_nanos, x.held_tool_calls, x.held_retries,
                 x.held_model_calls],
           x.crossed, x.exhausted, x.next_seq
    FROM budget.pool_balances x
    WHERE x.tenant_id = p_tenant
      AND (x.scope, x.scope_id, x.window_start) IN (
          SELECT * FROM unnest(p_scopes, p_scope_ids, p_windows))
    ORDER BY budget.scope_rank_v1(x.scope), x.scope_id COLLATE "C", x.window_start
    FOR UPDATE;
END;
$$;
