-- budget.iso_utc_v1: How a pool window's start is spelled in the ledger's pools document.
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0006).
--
-- A pool window as the ledger's pools document spells it (Python's isoformat of a UTC time).
CREATE OR REPLACE FUNCTION budget.iso_utc_v1(t timestamptz) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT to_char(t AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS')
        || CASE WHEN extract(microseconds FROM t)::bigint % 1000000 = 0 THEN ''
                ELSE to_char(t AT TIME ZONE 'UTC', '.US') END
        || '+00:00'
$$;
