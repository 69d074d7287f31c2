-- budget.epoch_us: A timestamp as microseconds since the epoch (reply documents, tenant stream).
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0003).
CREATE OR REPLACE FUNCTION budget.epoch_us(t timestamptz) RETURNS bigint
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    SELECT (extract(epoch FROM t) * 1000000)::bigint
$$;
