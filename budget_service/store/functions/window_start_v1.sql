-- budget.window_start_v1: Which calendar or rate window a moment falls in (its start).
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0006).
--
-- The UTC start of the calendar window containing t (policy.window_start).
CREATE OR REPLACE FUNCTION budget.window_start_v1(kind text, t timestamptz) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE kind
        WHEN 'minute' THEN date_trunc('minute', t AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
        WHEN 'hour' THEN date_trunc('hour', t AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
        WHEN 'day' THEN date_trunc('day', t AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
        WHEN 'week' THEN date_trunc('week', t AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
        WHEN 'month' THEN date_trunc('month', t AT TIME ZONE 'UTC') AT TIME ZONE 'UTC'
        ELSE timestamptz '1970-01-01 00:00:00+00' END
$$;
