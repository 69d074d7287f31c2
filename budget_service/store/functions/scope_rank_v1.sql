-- budget.scope_rank_v1: The canonical rank of a scope, the first key of the lock and reply order.
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0006).
--
-- The canonical rank of a scope: the run first, then the narrowest pool; end-user and API-key
-- pools (migration 0015) after project, so existing ranks and lock orders are unchanged.
CREATE OR REPLACE FUNCTION budget.scope_rank_v1(scope text) RETURNS integer
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT array_position(
        ARRAY['run', 'workflow', 'agent', 'project', 'end_user', 'api_key'], scope)
$$;
