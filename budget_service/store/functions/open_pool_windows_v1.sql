-- budget.open_pool_windows_v1: current definition, applied by the repeatable step of
-- servicekit/migrations.py whenever this file changes (issue 22: the engine is the only writer).
--
-- Creates the pool balance rows of the given windows that do not exist yet, in the canonical
-- order (budget.scope_rank_v1, scope_id, window), before any pool row is locked: two calls
-- creating rows never wait on each other crosswise. A row another call inserted and has not
-- committed is skipped by the NOT EXISTS probe, so this never waits on it either.
-- PL/pgSQL, not SQL: Citus cannot plan a statement on a distributed table inside an SQL
-- function that uses the function's parameters ("could not create distributed plan").
CREATE OR REPLACE FUNCTION budget.open_pool_windows_v1(
    p_tenant text, p_scopes text[], p_scope_ids text[], p_windows timestamptz[])
RETURNS void
LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO budget.pool_balances (tenant_id, scope, scope_id, window_start)
    SELECT p_tenant, k.scope, k.scope_id, k.window_start
    FROM unnest(p_scopes, p_scope_ids, p_windows) AS k(scope, scope_id, window_start)
    WHERE NOT EXISTS (
        SELECT 1 FROM budget.pool_balances x
        WHERE x.tenant_id = p_tenant AND x.scope = k.scope
          AND x.scope_id = k.scope_id AND x.window_start = k.window_start)
    ORDER BY budget.scope_rank_v1(k.scope), k.scope_id COLLATE "C", k.window_start
    ON CONFLICT DO NOTHING;
END;
$$;
