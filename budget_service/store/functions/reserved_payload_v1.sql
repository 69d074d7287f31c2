-- budget.reserved_payload_v1: current definition, applied by the repeatable step of
-- servicekit/migrations.py whenever this file changes (issue 22: the engine is the only writer).
--
-- The budget.reserved payload (OpenRun, ResumeRun) exactly as domain/events.py renders it:
-- the bounded limits in the order tokens, cost (USD), toolCalls, retries, and the narrowest
-- declared scope binding any of them ("run" when only host ceilings or nothing binds).
-- p_limits: max tokens, cost nanos, tool calls, retries (NULL: unbounded); p_binding: the
-- run's binding (dimension -> scope or 'host').
CREATE OR REPLACE FUNCTION budget.reserved_payload_v1(p_limits bigint[], p_binding jsonb)
RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT '{"effectiveBudget":{' || concat_ws(',',
               '"maxTokens":' || p_limits[1]::text,
               '"maxCostUsd":' || budget.usd_text(p_limits[2]),
               '"maxToolCalls":' || p_limits[3]::text,
               '"maxRetries":' || p_limits[4]::text)
        || '},"scope":"'
        || coalesce((SELECT b.value FROM jsonb_each_text(p_binding) AS b
                     WHERE b.value <> 'host'
                     ORDER BY budget.scope_rank_v1(b.value) LIMIT 1), 'run')
        || '"}'
$$;
