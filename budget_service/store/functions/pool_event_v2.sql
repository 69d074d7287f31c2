-- budget.pool_event_v2: A pool window's next event (tenant stream), numbered like a run's. The
-- caller counts it: pool.events := pool.events + 1.
CREATE OR REPLACE FUNCTION budget.pool_event_v2(
    pool budget.engine_pool_v2, type text, payload text) RETURNS budget.engine_event_v2
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT ROW(NULL, pool.scope, pool.scope_id, pool.window_start,
               pool.next_seq + pool.events, type, payload)::budget.engine_event_v2
$$;
