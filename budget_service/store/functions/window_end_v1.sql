-- budget.window_end_v1: When a pool window ends (NULL: it never renews).
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0006).
--
-- The end of the window starting at `start` (NULL: a window-less pool never renews).
CREATE OR REPLACE FUNCTION budget.window_end_v1(kind text, start timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE kind
        WHEN 'minute' THEN start + interval '1 minute'
        WHEN 'hour' THEN start + interval '1 hour'
        WHEN 'day' THEN start + interval '1 day'
        WHEN 'week' THEN start + interval '7 days'
        WHEN 'month' THEN (((start AT TIME ZONE 'UTC') + interval '1 month') AT TIME ZONE 'UTC')
        END
$$;
