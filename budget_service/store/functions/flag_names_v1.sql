-- budget.flag_names_v1: The once-per-dimension flag names a bit mask stands for.
-- Current definition, applied by the repeatable step of servicekit/migrations.py whenever
-- this file changes (moved here from migration 0010).
--
-- Once-per-dimension flags with the pools' fifth (bit 16 modelCalls), names sorted as Python
-- sorts them: cost, modelCalls, retries, tokens, toolCalls. Runs never set bit 16.
CREATE OR REPLACE FUNCTION budget.flag_names_v1(mask integer) RETURNS text[]
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT array_remove(ARRAY[
        CASE WHEN mask & 2 <> 0 THEN 'cost' END, CASE WHEN mask & 16 <> 0 THEN 'modelCalls' END,
        CASE WHEN mask & 8 <> 0 THEN 'retries' END, CASE WHEN mask & 1 <> 0 THEN 'tokens' END,
        CASE WHEN mask & 4 <> 0 THEN 'toolCalls' END
    ]::text[], NULL)
$$;
