-- budget.amount_text: What an event's amount reads as: cost in USD text, every other dimension an integer.
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0003).
--
-- An amount as its JSON number text (events.render_amount): cost in USD, others integers.
CREATE OR REPLACE FUNCTION budget.amount_text(dimension integer, amount bigint) RETURNS text
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN dimension = 2 THEN budget.usd_text(amount) ELSE amount::text END
$$;
