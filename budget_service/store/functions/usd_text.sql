-- budget.usd_text: How a nanos cost is written in events: exact USD text.
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0003).
--
-- Small SQL helpers are written to be inlined into the statements that use them (one SELECT
-- expression, no STRICT, volatility no stricter than their body): a call that is not inlined
-- costs tens of microseconds, and a SQL function with a FROM clause is planned on every call.

-- Exact USD text of a nanos amount, as events.usd_text: 1020000000 -> 1.02, 10^9 -> 1.0.
CREATE OR REPLACE FUNCTION budget.usd_text(nanos bigint) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT (nanos / 1000000000)::text || '.'
        || coalesce(nullif(rtrim(lpad((nanos % 1000000000)::text, 9, '0'), '0'), ''), '0')
$$;
